"use strict";
// The dashboard reads only the gateway's own JSON routes, on this origin.
// Everything shown is set as text (textContent), never as HTML: app ids,
// addresses and host errors come from the network.
(function () {
  var token = ""; // the operator's credential: in memory only, never stored

  function $(sel) { return document.querySelector(sel); }

  function fill(table, rows) {
    var body = table.tBodies[0];
    body.replaceChildren();
    rows.forEach(function (cells) {
      var tr = document.createElement("tr");
      cells.forEach(function (c) {
        var td = document.createElement("td");
        td.textContent = c === undefined || c === null ? "" : String(c);
        tr.appendChild(td);
      });
      body.appendChild(tr);
    });
  }

  function getJSON(path, auth) {
    var opts = { cache: "no-store", credentials: "omit", headers: {} };
    if (auth) { opts.headers.Authorization = "Bearer " + auth; }
    return fetch(path, opts).then(function (r) {
      return r.json().catch(function () { return {}; }).then(function (body) {
        return { status: r.status, body: body };
      });
    });
  }

  function status() {
    getJSON("/readyz").then(function (r) {
      var s = $("#status");
      s.textContent = (r.body.status || "unknown") + " (HTTP " + r.status + "), " +
        (r.body.active_connections || 0) + " active connections";
      s.className = r.status === 200 ? "" : "bad";
    }).catch(function (e) {
      $("#status").textContent = "unreachable: " + e;
      $("#status").className = "bad";
    });
    getJSON("/api/v3/discovery/clusters").then(function (r) {
      if (r.status !== 200) { return; }
      $("#self").textContent = r.body.self ? "(cluster " + r.body.self + ")" : "";
      fill($("#clusters"), (r.body.clusters || []).map(function (c) {
        return [c.id, c.url, c.active ? "yes" : "no"];
      }));
    }).catch(function () {});
  }

  function control() {
    if (!token) { return; }
    Promise.all([getJSON("/api/v3/apps", token), getJSON("/api/v3/hosts", token)]).then(function (rs) {
      var bad = rs.filter(function (r) { return r.status !== 200; })[0];
      if (bad) {
        var msg = "refused: HTTP " + bad.status + " " + (bad.body.detail || "");
        // A refused credential is not asked again: every refusal counts
        // toward the control API's lockout of this address (429 for every
        // token, the right one too), and polling would reach it in under
        // two minutes. Forget it and ask for it again.
        if (bad.status === 401 || bad.status === 429) {
          token = "";
          msg += " — the credential was not kept; enter it again";
          $("#token").focus();
        }
        $("#control-error").textContent = msg;
        fill($("#apps"), []);
        fill($("#hosts"), []);
        return;
      }
      $("#control-error").textContent = "";
      fill($("#apps"), (rs[0].body.apps || []).map(function (a) {
        return [a.id, a.mode, a.status];
      }));
      fill($("#hosts"), (rs[1].body.hosts || []).map(function (h) {
        return [h.host_id, (h.apps || []).join(", "), h.addr, h.scheme,
          h.state + (h.degraded ? " (degraded)" : ""), h.inflight, h.last_error];
      }));
    }).catch(function (e) {
      $("#control-error").textContent = "unreachable: " + e;
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    $("#login").addEventListener("submit", function (ev) {
      ev.preventDefault();
      token = $("#token").value.trim();
      $("#token").value = "";
      control();
    });
    status();
    setInterval(function () { status(); control(); }, 2000);
  });
})();
