package dashboard

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// csp admits the page's own script and style and same-origin fetches,
// and nothing else: no inline script, no framing, no form posts. Images
// may be data: URLs for the page's empty icon, which spares the browser
// a /favicon.ico request answered 404.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
	"img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the page at "/" and its script and style under
// "/dashboard/". Mount it for exactly those paths. Safe for concurrent use.
func Handler() http.Handler {
	sub, _ := fs.Sub(static, "static") // the embedded tree has it
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		// frame-ancestors says the same to every browser that reads
		// CSP; this is for those that do not.
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		switch r.URL.Path {
		case "/":
			http.ServeFileFS(w, r, sub, "index.html")
		case "/dashboard/dashboard.js", "/dashboard/dashboard.css":
			r2 := *r
			u := *r.URL
			u.Path = r.URL.Path[len("/dashboard"):]
			r2.URL = &u
			files.ServeHTTP(w, &r2)
		default:
			http.NotFound(w, r)
		}
	})
}
