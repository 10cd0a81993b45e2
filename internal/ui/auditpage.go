package ui

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/auth"
)

// canReadAudit reports whether p may read its organisation's audit log:
// it only hides the nav link, the API's AuditService.List decides.
func canReadAudit(p *auth.Principal) bool { return p != nil && p.Allow(auth.Read, p.Scope("")) == nil }

// maxAuditPage bounds how far back the audit page goes: page n asks the
// API for n×PageSize records.
const maxAuditPage = 200

// auditFilter is what the audit page is asked for.
type auditFilter struct {
	Subject, Action, Object string
	Page                    int
}

// auditRow is one audit record as the page shows it.
type auditRow struct {
	Time                time.Time
	Subject, Org, From  string
	Action, Procedure   string // "HardwareService/Create", and in full
	Namespace, Object   string
	Outcome, Message    string
	OK, Unauthenticated bool
}

type auditData struct {
	Filter     auditFilter
	Rows       []auditRow
	Refused    string // the API's refusal, said politely
	Prev, Next string
}

// auditPage is /ui/audit: the API's AuditService.List as the session's
// caller (an admin reads every record, anyone else its organisation's),
// newest first, 50 a page. The API has no offset: page n asks for the
// newest n×50+1 records (the one more says whether a next page exists).
func (u *UI) auditPage(w http.ResponseWriter, r *request) {
	q := r.URL.Query()
	d := auditData{Filter: auditFilter{Subject: strings.TrimSpace(q.Get("subject")), Action: strings.TrimSpace(q.Get("action")),
		Object: strings.TrimSpace(q.Get("object"))}}
	page, err := parsePage(q)
	if err != nil {
		u.errorPage(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if page > maxAuditPage {
		u.errorPage(w, r, http.StatusBadRequest, fmt.Sprintf("page %d: the audit log pages back %d pages (%d records) at most; narrow the filters",
			page, maxAuditPage, maxAuditPage*PageSize))
		return
	}
	d.Filter.Page = page
	client := anvilv1connect.NewAuditServiceClient(u.apiClient(r))
	resp, err := client.List(r.Context(), asCaller(u, r, &v1.ListAuditRequest{Subject: d.Filter.Subject,
		Procedure: d.Filter.Action, Object: d.Filter.Object, Limit: int32(page*PageSize + 1)}))
	if err != nil {
		d.Refused = apiRefusal(err)
		u.render(w, r, httpStatus(err), "audit", "Audit log", d)
		return
	}
	recs := resp.Msg.GetRecords() // oldest first
	newest := len(recs) - 1 - (page-1)*PageSize
	for i := newest; i >= 0 && i > newest-PageSize; i-- {
		d.Rows = append(d.Rows, auditRowOf(recs[i]))
	}
	more := len(recs) > page*PageSize
	pages := page
	if more {
		pages++
	}
	d.Prev, d.Next = pageLinks(q, page, pages)
	u.render(w, r, http.StatusOK, "audit", "Audit log", d)
}

func auditRowOf(rec *v1.AuditRecord) auditRow {
	proc := rec.GetProcedure()
	action := proc[strings.LastIndexByte(proc[:max(0, strings.LastIndexByte(proc, '/'))], '.')+1:]
	return auditRow{Time: rec.GetTime().AsTime(), Subject: rec.GetSubject(), Org: rec.GetOrg(), From: rec.GetClientIp(),
		Action: action, Procedure: proc, Namespace: rec.GetNamespace(), Object: rec.GetObject(),
		Outcome: rec.GetOutcome(), Message: rec.GetMessage(), OK: rec.GetOutcome() == "ok", Unauthenticated: rec.GetUnauthenticated()}
}

// apiRefusal is the sentence a page shows for an API call's refusal.
func apiRefusal(err error) string {
	switch connect.CodeOf(err) {
	case connect.CodePermissionDenied:
		return "Your role may not read this: " + connectMessage(err)
	case connect.CodeUnavailable:
		return "Not available on this server: " + connectMessage(err)
	}
	return connectMessage(err)
}
