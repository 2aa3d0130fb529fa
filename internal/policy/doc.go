// Package policy owns gatehouse's per-app path rules (DESIGN §2 step 8):
// ordered allow/deny rules by method and path, first match wins, default
// allow. It is pure; the gateway's policy layer applies the decision and
// counts denials.
//
// # Matching on cleaned paths
//
// A deny rule must not be walked around by an encoding the host undoes
// (/a/../admin, //admin, /%2e%2e/admin, /admin%2f, /admin/, /admin;x,
// /admin., /admin%09, \admin, /ADMIN). [Check] therefore evaluates the rules against every
// reading of the path a host might make: the path as sent, and the path
// after each round of percent-decoding (up to [MaxDecode] rounds, so
// %252e%252e counts as .. too). Each reading is cleaned: a host may take
// `\` for `/`, drop a segment's ";params" suffix, drop a segment's trailing
// dots and spaces (IIS, Windows), drop the white space and control
// characters at either end of a segment (Java's String.trim, as Spring's
// trimTokens applies it, drops every char up to U+0020; .NET's Trim, JS's
// trim and Python's strip drop Unicode spaces such as U+00A0, U+0085,
// U+2028, U+3000 and U+FEFF too; a host that reads the path as Latin-1
// reads a lone %a0 or %85 byte as NBSP or NEL: /%09admin, /admin%a0 and
// /admin%E3%80%80 are /admin), compare paths without case (IIS, Windows and macOS file
// systems: /ADMIN is /admin), end the path at a decoded NUL (C strings:
// /admin%00/x is /admin) or at a decoded '?' or '#' (a host that decodes
// the path before it cuts off the query: /admin%3Fx is /admin) - or make
// only some of these readings, which changes which segment a ".." removes -
// so every combination of them is
// tried, each followed by path.Clean (removing //, . and .. segments and
// any trailing slash); the case-free readings match folded paths against
// folded rules, each letter upper-cased then lower-cased, as hosts that
// compare upper-cased (ASP.NET Core, IIS, Java's equalsIgnoreCase) read
// dotless ı as i and long ſ as s. A path with ".." is also read as a host that
// does not remove dot segments reads it (a prefix router: /admin/../x is
// under /admin/), with `\` as `/` or not, folded or not. [Clean] makes all
// but folding at once. The
// request is allowed only if every reading is allowed, so a reading can
// add a denial, never lift one. Method names compare case-insensitively, and a rule naming GET
// also covers HEAD, which most hosts serve with their GET handler.
//
// The readings of one request are bounded ([Work], [MaxWork]): a request
// whose readings would read more is denied, as no reading of it can be
// shown allowed.
package policy
