package ui

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/tmplstatic"
)

// hardwareChoices caps the machine names a template's page offers to
// preview against; any other machine of the namespace can be typed.
const hardwareChoices = 200

// templateRow is one Template of the list.
type templateRow struct {
	Namespace, Name string
	// Tasks and Actions as written (tmplstatic.Count); Counted is false
	// when the data does not read as a workflow before rendering.
	Tasks, Actions int
	Counted        bool
	Created        *time.Time
	// Generation is the revision of the Template's spec: 1 as created,
	// one more per change. The store keeps no time of the last change.
	Generation int64
}

func (u *UI) templateList(w http.ResponseWriter, r *request) {
	// Every organisation holds a handful of templates: a copy each is
	// cheap, and the view does not follow them.
	objs, _, err := u.cfg.Store.List(r.Context(), model.KindTemplate, store.ListOptions{Namespace: r.principal.Scope("")})
	if err != nil {
		u.errorPage(w, r, http.StatusInternalServerError, "The templates could not be read: "+err.Error())
		return
	}
	var rows []templateRow
	for _, o := range objs {
		t := o.(*model.Template)
		if !r.principal.Sees(t.Namespace) {
			continue
		}
		row := templateRow{Namespace: t.Namespace, Name: t.Name, Created: t.CreationTimestamp, Generation: t.Generation}
		if t.Spec.Data != nil {
			row.Tasks, row.Actions, row.Counted = tmplstatic.Count(*t.Spec.Data)
		}
		rows = append(rows, row)
	}
	slices.SortFunc(rows, func(a, b templateRow) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	u.render(w, r, http.StatusOK, "templates", "Templates", rows)
}

// templateLine is one line of a Template's data, numbered for the
// preview's error to point at.
type templateLine struct {
	N    int
	Text string
	Bad  bool // the line the rendering error names
}

type templateDetailData struct {
	T         *model.Template
	Lines     []templateLine
	Hardware  string   // the machine previewed against, "" for none
	Choices   []string // machine names of the namespace to choose from
	More      bool     // the namespace has more machines than Choices
	Preview   *v1.RenderTemplateResponse
	Error     string // the preview could not be made (not the template's fault)
	ErrorLine int
}

// templateDetail shows a Template's data and, when the query names a
// machine (?hardware=NAME, a GET form so the preview can be linked), the
// workflow the API's TemplateService.Render says that machine would get.
func (u *UI) templateDetail(w http.ResponseWriter, r *request) {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	var t *model.Template
	if r.principal.Sees(ns) {
		if obj, err := u.cfg.Store.Get(r.Context(), model.KindTemplate, ns, name); err == nil {
			t = obj.(*model.Template)
		}
	}
	if t == nil {
		u.errorPage(w, r, http.StatusNotFound, fmt.Sprintf("No template %s/%s.", ns, name))
		return
	}
	d := templateDetailData{T: t, Hardware: strings.TrimSpace(r.URL.Query().Get("hardware"))}
	d.Choices, d.More = u.view.hardwareNames(ns, hardwareChoices)
	status := http.StatusOK
	if d.Hardware != "" {
		client := anvilv1connect.NewTemplateServiceClient(u.apiClient(r))
		resp, err := client.Render(r.Context(), asCaller(u, r, &v1.RenderTemplateRequest{Namespace: ns, Template: name, Hardware: d.Hardware}))
		switch {
		case err != nil:
			d.Error, status = connectMessage(err), httpStatus(err)
		default:
			d.Preview, d.ErrorLine = resp.Msg, int(resp.Msg.GetLine())
		}
	}
	if t.Spec.Data != nil {
		for i, line := range strings.Split(strings.TrimSuffix(*t.Spec.Data, "\n"), "\n") {
			d.Lines = append(d.Lines, templateLine{N: i + 1, Text: line, Bad: i+1 == d.ErrorLine})
		}
	}
	u.render(w, r, status, "template_detail", "Template "+t.Name, d)
}

// hardwareNames returns the names of the first limit machines of namespace
// ns, sorted, and whether it holds more.
func (v *view) hardwareNames(ns string, limit int) ([]string, bool) {
	prefix := ns + "/"
	v.mu.RLock()
	defer v.mu.RUnlock()
	i, _ := slices.BinarySearch(v.hwKeys, prefix)
	var out []string
	for ; i < len(v.hwKeys) && strings.HasPrefix(v.hwKeys[i], prefix); i++ {
		if len(out) == limit {
			return out, true
		}
		out = append(out, v.hwKeys[i][len(prefix):])
	}
	return out, false
}
