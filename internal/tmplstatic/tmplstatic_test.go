package tmplstatic

import "testing"

func TestCount(t *testing.T) {
	for _, c := range []struct {
		name, data     string
		tasks, actions int
		ok             bool
	}{
		{"two tasks", "version: \"0.1\"\ntasks:\n- name: a\n  worker: \"{{.device_1}}\"\n  actions:\n  - {name: x, image: i}\n  - {name: y, image: \"{{ .img }}\"}\n- name: b\n  actions:\n  - {name: z, image: i}\n", 2, 3, true},
		{"a multi-line action", "tasks:\n- name: a\n  worker: {{\n .device_1 }}\n  actions: []\n", 1, 0, true},
		{"no tasks", "version: 1\n", 0, 0, false},
		{"not YAML", "tasks: [\n", 0, 0, false},
	} {
		tasks, actions, ok := Count(c.data)
		if tasks != c.tasks || actions != c.actions || ok != c.ok {
			t.Errorf("%s: Count = %d, %d, %v; want %d, %d, %v", c.name, tasks, actions, ok, c.tasks, c.actions, c.ok)
		}
	}
}

// FuzzCount: any text reads without panicking, and a count comes only
// with ok.
func FuzzCount(f *testing.F) {
	f.Add("tasks:\n- actions: [{name: a}]\n")
	f.Add("{{ range }}\n")
	f.Fuzz(func(t *testing.T, data string) {
		tasks, actions, ok := Count(data)
		if !ok && (tasks != 0 || actions != 0) {
			t.Errorf("Count(%q) = %d, %d without ok", data, tasks, actions)
		}
	})
}
