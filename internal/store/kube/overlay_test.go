package kube

import (
	"encoding/json"
	"reflect"
	"testing"
)

func decodeJSON(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("%v in %s", err, s)
	}
	return m
}

// TestKeepForeign: the lists of a merge patch become the stored lists
// with the caller's change made in them — the other tool's fields in
// their elements kept, elements the caller removed or added as the
// caller says, and a list whose length changed as the caller sends it.
func TestKeepForeign(t *testing.T) {
	for _, tc := range []struct {
		name          string
		from, to, raw string
		want          string
	}{
		{
			name: "a field changed in an element keeps the element's foreign fields",
			from: `{"spec":{"interfaces":[{"netboot":{"allowPXE":true}},{"dhcp":{"mac":"b"}}]}}`,
			to:   `{"spec":{"interfaces":[{"netboot":{"allowPXE":false}},{"dhcp":{"mac":"b"}}]}}`,
			raw:  `{"spec":{"interfaces":[{"netboot":{"allowPXE":true,"uri":"x"},"port":"swp1"},{"dhcp":{"mac":"b","vlan":"7"}}]},"status":{"s":1}}`,
			want: `{"spec":{"interfaces":[{"netboot":{"allowPXE":false,"uri":"x"},"port":"swp1"},{"dhcp":{"mac":"b","vlan":"7"}}]}}`,
		},
		{
			name: "a key the caller removed from an element is removed",
			from: `{"spec":{"disks":[{"device":"/dev/sda","wipe":true}]}}`,
			to:   `{"spec":{"disks":[{"device":"/dev/sda"}]}}`,
			raw:  `{"spec":{"disks":[{"device":"/dev/sda","wipe":true,"serial":"S1"}]}}`,
			want: `{"spec":{"disks":[{"device":"/dev/sda","serial":"S1"}]}}`,
		},
		{
			name: "a list of another length is the caller's",
			from: `{"spec":{"disks":[{"device":"/dev/sda"}]}}`,
			to:   `{"spec":{"disks":[{"device":"/dev/sda"},{"device":"/dev/sdb"}]}}`,
			raw:  `{"spec":{"disks":[{"device":"/dev/sda","serial":"S1"}]}}`,
			want: `{"spec":{"disks":[{"device":"/dev/sda"},{"device":"/dev/sdb"}]}}`,
		},
		{
			name: "a stored list of another length than the caller read is the caller's",
			from: `{"spec":{"disks":[{"device":"/dev/sda"}]}}`,
			to:   `{"spec":{"disks":[{"device":"/dev/sdc"}]}}`,
			raw:  `{"spec":{"disks":[{"device":"/dev/sda"},{"device":"/dev/sdb"}]}}`,
			want: `{"spec":{"disks":[{"device":"/dev/sdc"}]}}`,
		},
		{
			name: "a scalar list is the caller's",
			from: `{"spec":{"volumes":["a"]}}`,
			to:   `{"spec":{"volumes":["b"]}}`,
			raw:  `{"spec":{"volumes":["a"]}}`,
			want: `{"spec":{"volumes":["b"]}}`,
		},
		{
			name: "a list the stored object lacks is the caller's",
			from: `{"spec":{"volumes":["a"]}}`,
			to:   `{"spec":{"volumes":["b"]}}`,
			raw:  `{"spec":{}}`,
			want: `{"spec":{"volumes":["b"]}}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from, to := decodeJSON(t, tc.from), decodeJSON(t, tc.to)
			p := mergePatch(from, to)
			if !hasList(p) {
				t.Fatalf("patch %v has no list", p)
			}
			keepForeign(p, from, to, decodeJSON(t, tc.raw))
			if want := decodeJSON(t, tc.want); !reflect.DeepEqual(p, want) {
				got, _ := json.Marshal(p)
				t.Errorf("patch = %s\nwant    %s", got, tc.want)
			}
		})
	}
	if hasList(mergePatch(decodeJSON(t, `{"spec":{"a":{"b":1}}}`), decodeJSON(t, `{"spec":{"a":{"b":2}}}`))) {
		t.Error("hasList of a patch without lists = true")
	}
}
