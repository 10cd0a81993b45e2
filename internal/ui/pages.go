package ui

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/logstore"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// parsePages parses each page of templates/ with the layout.
func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"duration": actionDuration,
		"when": func(t *time.Time) string {
			if t == nil {
				return ""
			}
			return t.UTC().Format(time.RFC3339)
		},
		"bytes":      func(n uint64) string { return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30)) },
		"stateClass": stateClass,
		"join":       strings.Join,
		"clock":      func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"powerLabel": powerLabel,
		"logTime":    logTime,
		"logSource":  logSource,
		"asset":      asset,
	}
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	pages := map[string]*template.Template{}
	for _, n := range names {
		if n == "templates/layout.html" || strings.HasPrefix(path.Base(n), "_") {
			continue // the layout, and parts every page holds (_logs.html)
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/_*.html", n)
		if err != nil {
			return nil, fmt.Errorf("ui: template %s: %w", n, err)
		}
		pages[strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")] = t
	}
	return pages, nil
}

// actionDuration is how long a has run: its recorded duration once it
// ended, the time since it started while it runs.
func actionDuration(a model.Action) string {
	switch {
	case a.ExecutionStart != nil && a.ExecutionStop != nil:
		return a.ExecutionStop.Sub(*a.ExecutionStart).Round(time.Second).String()
	case a.ExecutionDuration != "":
		return a.ExecutionDuration
	case a.ExecutionStart != nil && a.State == model.StateRunning:
		return time.Since(*a.ExecutionStart).Round(time.Second).String() + " so far"
	}
	return ""
}

// pageData is what every page's template gets.
type pageData struct {
	Title   string
	Subject string // who is logged in; "" on the login page
	CSRF    string
	Audit   bool // the nav links the audit log (canReadAudit)
	Data    any
	// Refresh, if set, is where the page sends the browser at once
	// (oidc.go's continue page).
	Refresh string
}

// render writes page name with status.
func (u *UI) render(w http.ResponseWriter, r *request, status int, name, title string, data any) {
	pd := pageData{Title: title, Data: data}
	if r != nil && r.session != nil {
		pd.Subject, pd.CSRF = r.principal.Subject, r.session.csrf
		pd.Audit = canReadAudit(r.principal)
	}
	u.renderPage(w, status, name, pd)
}

// renderPage writes page name with status and pd.
func (u *UI) renderPage(w http.ResponseWriter, status int, name string, pd pageData) {
	var buf bytes.Buffer
	if err := u.pages[name].Execute(&buf, pd); err != nil {
		u.log.Error("ui: page failed to render", "page", name, "err", err)
		http.Error(w, "the page failed to render; the server's log says why", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes()) // a browser gone away is not our error
}

// errorPage answers msg with status, as a page.
func (u *UI) errorPage(w http.ResponseWriter, r *request, status int, msg string) {
	u.render(w, r, status, "error", http.StatusText(status), msg)
}

type loginData struct {
	Next, Error   string
	Ended, NoAuth bool
	OIDC          string // the identity provider's name, with OIDC login on
}

func (u *UI) loginPage(w http.ResponseWriter, r *http.Request) {
	d := u.loginData(safeNext(r.URL.Query().Get("next")), "")
	d.Ended = r.URL.Query().Get("ended") != ""
	u.render(w, nil, http.StatusOK, "login", "Log in", d)
}

// login checks the token with the API's Authenticate and starts a
// session. The token comes in the POST body only; the answer is a
// redirect to a UI path that never carries it.
func (u *UI) login(w http.ResponseWriter, r *http.Request) {
	token := strings.TrimSpace(r.PostFormValue("token"))
	next := safeNext(r.PostFormValue("next"))
	if token == "" && u.cfg.Authenticate != nil {
		u.loginError(w, http.StatusBadRequest, next, "Paste a token: the field is empty.")
		return
	}
	p, err := u.authenticate(r.Context(), token)
	if err != nil {
		u.loginError(w, http.StatusUnauthorized, next, "This token is not accepted: "+err.Error())
		return
	}
	u.startSession(w, r, token, p, next)
}

// startSession starts a session holding token (whose principal is p) and
// sends the browser to next.
func (u *UI) startSession(w http.ResponseWriter, r *http.Request, token string, p *auth.Principal, next string) {
	ss := u.sessions.create(token, u.cfg.Clock.Now(), p.ExpiresAt)
	setCookie(w, r, ss)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// loginError shows the login page with msg.
func (u *UI) loginError(w http.ResponseWriter, status int, next, msg string) {
	u.render(w, nil, status, "login", "Log in", u.loginData(next, msg))
}

// loginData is the login page's data for next, with msg as its error.
func (u *UI) loginData(next, msg string) loginData {
	d := loginData{Next: next, Error: msg, NoAuth: u.cfg.Authenticate == nil}
	if u.oidc != nil {
		d.OIDC = u.oidc.name()
	}
	return d
}

func (u *UI) logout(w http.ResponseWriter, r *request) {
	u.sessions.end(r.session.id)
	setCookie(w, r.Request, nil)
	http.Redirect(w, r.Request, basePath+"login", http.StatusSeeOther)
}

func (u *UI) fleetPage(w http.ResponseWriter, r *request) {
	u.render(w, r, http.StatusOK, "fleet", "Fleet", u.fleet(r.principal))
}

type hardwareListData struct {
	Filter hwFilter
	States []string
	Result hwPage
	Error  string
	Prev   string // query of the previous page, "" on the first
	Next   string
}

func (u *UI) hardwareList(w http.ResponseWriter, r *request) {
	q := r.URL.Query()
	f := hwFilter{Search: q.Get("q"), Labels: q.Get("labels"), State: q.Get("state"), MAC: q.Get("mac"), IP: q.Get("ip")}
	if p := q.Get("page"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			u.errorPage(w, r, http.StatusBadRequest, fmt.Sprintf("page %q: want a page number from 1", p))
			return
		}
		f.Page = n
	}
	d := hardwareListData{Filter: f, States: states}
	res, err := u.hardwarePage(r.Context(), r.principal, f)
	status := http.StatusOK
	if err != nil {
		d.Error, status = err.Error(), http.StatusBadRequest
	}
	d.Result = res
	page := func(n int) string {
		v := url.Values{}
		for k, val := range map[string]string{"q": f.Search, "labels": f.Labels, "state": f.State, "mac": f.MAC, "ip": f.IP} {
			if val != "" {
				v.Set(k, val)
			}
		}
		v.Set("page", strconv.Itoa(n))
		return "?" + v.Encode()
	}
	if res.Page > 1 {
		d.Prev = page(res.Page - 1)
	}
	if res.Page < res.Pages {
		d.Next = page(res.Page + 1)
	}
	u.render(w, r, status, "hardware", "Hardware", d)
}

type hardwareDetailData struct {
	HW           *model.Hardware
	Workflows    []*model.Workflow
	CanProvision bool
	Templates    []string
	CSRF         string // the session's, for the reprovision form
	Record       *logData
	Actions      machineActions // netboot and power (actions.go)
}

func (u *UI) hardwareDetail(w http.ResponseWriter, r *request) {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	hw := u.view.hardwareByKey(ns + "/" + name)
	if hw == nil || !r.principal.Sees(ns) {
		u.errorPage(w, r, http.StatusNotFound, fmt.Sprintf("No hardware %s/%s.", ns, name))
		return
	}
	d := hardwareDetailData{HW: hw, Workflows: u.view.workflowsOf(ns + "/" + name),
		CanProvision: r.principal.Allow(auth.Provision, ns) == nil, CSRF: r.session.csrf,
		Actions: u.machineActionsOf(r, hw, r.URL.Query().Get("job"))}
	if d.CanProvision {
		// A namespace holds a handful of templates: a copy each is cheap.
		tmpls, _, err := u.cfg.Store.List(r.Context(), model.KindTemplate, store.ListOptions{Namespace: ns})
		if err != nil {
			u.errorPage(w, r, http.StatusInternalServerError, "The templates could not be read: "+err.Error())
			return
		}
		for _, t := range tmpls {
			d.Templates = append(d.Templates, t.GetObjectMeta().Name)
		}
	}
	d.Record = u.readLog(logstore.MachineSelection(hw), hardwareEventsURL(ns, name))
	u.render(w, r, http.StatusOK, "hardware_detail", "Hardware "+hw.Name, d)
}

// reprovision sends WorkflowService.Reprovision to the API as the
// session's caller and, done, shows the new workflow.
func (u *UI) reprovision(w http.ResponseWriter, r *request) {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	tmpl := r.PostFormValue("template")
	wf, warnings, err := u.reprovisionCall(r, ns, name, tmpl)
	if err != nil {
		u.errorPage(w, r, httpStatus(err), "Reprovision refused: "+connectMessage(err))
		return
	}
	for _, msg := range warnings {
		u.log.Info("ui: reprovision warning", "hardware", ns+"/"+name, "warning", msg)
	}
	http.Redirect(w, r.Request, basePath+"workflows/"+url.PathEscape(ns)+"/"+url.PathEscape(wf), http.StatusSeeOther)
}

// httpStatus maps an API error to the page's status.
func httpStatus(err error) int {
	switch connect.CodeOf(err) {
	case connect.CodeUnauthenticated:
		return http.StatusUnauthorized
	case connect.CodePermissionDenied:
		return http.StatusForbidden
	case connect.CodeNotFound:
		return http.StatusNotFound
	case connect.CodeInvalidArgument:
		return http.StatusBadRequest
	case connect.CodeFailedPrecondition, connect.CodeAlreadyExists, connect.CodeAborted:
		return http.StatusConflict
	case connect.CodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func connectMessage(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}

type workflowData struct {
	WF  *model.Workflow
	Row wfRow
	// CanCancel, Cancelling and CSRF are for Cancel (actions.go).
	CanCancel, Cancelling bool
	CSRF                  string
	Log                   *logData // its agent's lines (logs.go); nil without a log store
}

// newWorkflowData is what the workflow page and its events show of wf to
// r's caller.
func newWorkflowData(r *request, wf *model.Workflow) workflowData {
	return workflowData{WF: wf, Row: newWFRow(wf), CanCancel: canCancel(r, wf), Cancelling: cancelling(wf), CSRF: r.session.csrf}
}

// visibleWorkflow returns the workflow of the request's path that its
// caller may see, or nil.
func (u *UI) visibleWorkflow(r *request) *model.Workflow {
	ns := r.PathValue("ns")
	if !r.principal.Sees(ns) {
		return nil
	}
	return u.view.workflow(ns + "/" + r.PathValue("name"))
}

func (u *UI) workflowDetail(w http.ResponseWriter, r *request) {
	wf := u.visibleWorkflow(r)
	if wf == nil {
		u.errorPage(w, r, http.StatusNotFound, fmt.Sprintf("No workflow %s/%s.", r.PathValue("ns"), r.PathValue("name")))
		return
	}
	d := newWorkflowData(r, wf)
	d.Log = u.readLog(logstore.Selection{WorkflowID: wf.Key()}, "")
	u.render(w, r, http.StatusOK, "workflow", "Workflow "+wf.Name, d)
}

// workflowEvents streams the workflow's progress as Server-Sent Events:
// an "actions" event holding the progress fragment (the same template
// the page shows, escaped alike) now and after every change the store's
// watch reports, "gone" when the workflow is deleted; and its agent's
// log lines ("logs", then "log": logs.go).
func (u *UI) workflowEvents(w http.ResponseWriter, r *request) {
	key := r.PathValue("ns") + "/" + r.PathValue("name")
	if u.visibleWorkflow(r) == nil {
		http.Error(w, "no workflow "+key, http.StatusNotFound)
		return
	}
	changed, stop := u.view.subscribe(key)
	defer stop()
	feed := u.followLogs(logstore.Selection{WorkflowID: key})
	defer feed.close()
	es := u.openEvents(w, r.Request)
	defer es.close()
	var last string
	for {
		wf := u.view.workflow(key)
		if wf == nil {
			_ = es.send("gone", "deleted")
			return
		}
		if wf.ResourceVersion != last {
			last = wf.ResourceVersion
			var buf bytes.Buffer
			if err := u.pages["workflow"].ExecuteTemplate(&buf, "progress", newWorkflowData(r, wf)); err != nil {
				u.log.Error("ui: workflow fragment failed to render", "workflow", key, "err", err)
				return
			}
			if es.send("actions", buf.String()) != nil {
				return
			}
		}
		if feed != nil && !feed.started {
			// The log's tail follows the first progress event.
			if feed.start(w) != nil || es.flush() != nil {
				return
			}
		}
		select {
		case <-es.done():
			return
		case <-es.keepAlive():
			if es.ping() != nil {
				return
			}
		case <-changed:
		case <-feed.ready():
			if feed.next(w) != nil || es.flush() != nil {
				return
			}
		}
	}
}

// stateClass is the CSS class of a state, for its colour.
func stateClass(s string) string {
	s = strings.ToLower(s)
	if slices.Contains(states, strings.ToUpper(s)) {
		return "state-" + s
	}
	return "state-none"
}
