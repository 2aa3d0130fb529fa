"use strict";
// The dashboard reads only the gateway's own JSON routes, on this origin.
// Everything shown is set as text (textContent), never as HTML: app ids,
// addresses and host errors come from the network.
(function () {
  var token = ""; // the operator's credential: in memory only, never stored

  // A platform may hold a million apps, and the whole list is megabytes
  // to build on the gateway and to lay out here: the page shows one page
  // of apps and of hosts at a time, and asks for them every controlEvery
  // ms, not while the tab is hidden. Readiness, which costs nothing, is
  // asked every statusEvery ms.
  var pageSize = 100;
  var statusEvery = 2000;
  var controlEvery = 5000;
  var appsAfter = [""]; // the cursor of every apps page up to the one shown
  var appsNext = ""; // the cursor of the apps page after it, if any

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
        return { status: r.status, body: body, retryAfter: r.headers.get("Retry-After") };
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


  // clearControl empties the apps and hosts and what is said of them.
  function clearControl() {
    $("#control-error").textContent = "";
    fill($("#apps"), []);
    fill($("#hosts"), []);
    $("#apps-more").textContent = "";
    $("#hosts-more").textContent = "";
    $("#apps-next").hidden = true;
    $("#apps-first").hidden = true;
  }

  // forget drops the credential, and its apps and hosts leave the
  // screen with it, for an operator who leaves the tab open: they are
  // not refreshed without it.
  function forget() {
    token = "";
    appsAfter = [""];
    appsNext = "";
    $("#token").value = "";
    clearControl();
  }

  function control() {
    if (!token) { return; }
    var sent = token;
    var after = appsAfter[appsAfter.length - 1];
    // An answer for a credential the operator has since replaced, or for
    // a page of apps they have left, says nothing of what the page shows
    // now: a late refusal must not drop the new credential, nor a late
    // page replace the one asked for since.
    function stale() { return sent !== token || after !== appsAfter[appsAfter.length - 1]; }
    var appsPath = "/api/v3/apps?limit=" + pageSize + (after ? "&after=" + encodeURIComponent(after) : "");
    Promise.all([getJSON(appsPath, sent), getJSON("/api/v3/hosts?limit=" + pageSize, sent)]).then(function (rs) {
      if (stale()) { return; }
      var bad = rs.filter(function (r) { return r.status !== 200; })[0];
      if (bad) {
        var msg = "refused: HTTP " + bad.status + " " + (bad.body.detail || "");
        // How long the lockout lasts, as gatehouse ctl says it: a
        // credential typed again before then is refused again.
        // It is seconds or an HTTP-date (RFC 9110 §10.2.3), a proxy's in
        // front of this listener perhaps; anything else says nothing.
        var ra = bad.retryAfter || "";
        if (/^[0-9]+$/.test(ra)) { msg += " (Retry-After: " + ra + " s)"; }
        else if (/^[A-Z][a-z]{2}, [0-9]{2} [A-Z][a-z]{2} [0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2} GMT$/.test(ra)) { msg += " (Retry-After: " + ra + ")"; }
        // A refused credential is not asked again: every refusal counts
        // toward the control API's lockout of this address (429 for every
        // token, the right one too), and polling would reach it in under
        // two minutes. Forget it and ask for it again.
        if (bad.status === 401 || bad.status === 429) {
          token = "";
          msg += " — the credential was not kept; enter it again";
          $("#token").focus();
        }
        clearControl();
        $("#control-error").textContent = msg;
        return;
      }
      $("#control-error").textContent = "";
      var apps = rs[0].body.apps || [];
      fill($("#apps"), apps.map(function (a) {
        return [a.id, a.mode, a.status];
      }));
      appsNext = rs[0].body.next || "";
      var paged = appsNext || appsAfter.length > 1;
      // An empty table is said to be empty: headers alone look like a
      // page still loading.
      $("#apps-more").textContent = !paged ? (apps.length === 0 ? "no apps" : "") : apps.length === 0 ? "no apps after " + after :
        "apps " + apps[0].id + " to " + apps[apps.length - 1].id + (appsNext ? "; more follow" : "; the last");
      $("#apps-next").hidden = !appsNext;
      $("#apps-first").hidden = appsAfter.length === 1;
      var hosts = rs[1].body.hosts || [];
      fill($("#hosts"), hosts.map(function (h) {
        return [h.host_id, (h.apps || []).join(", "), h.addr, h.scheme,
          h.state + (h.degraded ? " (degraded)" : ""), h.inflight, h.last_error];
      }));
      $("#hosts-more").textContent = rs[1].body.next ? "the first " + hosts.length + " hosts by id; more follow (gatehouse ctl hosts list -limit)" :
        hosts.length === 0 ? "no hosts" : "";
    }).catch(function (e) {
      if (stale()) { return; }
      $("#control-error").textContent = "unreachable: " + e;
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    $("#login").addEventListener("submit", function (ev) {
      ev.preventDefault();
      var typed = $("#token").value.trim();
      forget();
      // A character past Latin-1 cannot be sent in a header (fetch
      // failed, and the page said "unreachable"); one it sends as a
      // Latin-1 byte, or a space, cannot match a token but counted
      // toward the lockout. Every credential that can work is
      // printable ASCII (control.token, a JWT).
      if (!typed) {
        $("#control-error").textContent = "enter the platform credential";
      } else if (!/^[\x21-\x7e]+$/.test(typed)) {
        $("#control-error").textContent = "not sent: a credential is printable ASCII without spaces (control.token, or a platform JWT)";
      } else {
        token = typed;
        control();
      }
    });
    $("#forget").addEventListener("click", forget);
    $("#apps-next").addEventListener("click", function () {
      if (appsNext) { appsAfter.push(appsNext); control(); }
    });
    $("#apps-first").addEventListener("click", function () {
      appsAfter = [""];
      control();
    });
    status();
    setInterval(status, statusEvery);
    setInterval(function () { if (!document.hidden) { control(); } }, controlEvery);
  });
})();
