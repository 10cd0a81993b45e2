package ui

import (
	"testing"
	"testing/fstest"
)

// TestDigestFollowsContent: another file's content, or another name,
// gives another version.
func TestDigestFollowsContent(t *testing.T) {
	a := fstest.MapFS{"static/app.js": {Data: []byte("a")}, "static/style.css": {Data: []byte("b")}}
	b := fstest.MapFS{"static/app.js": {Data: []byte("a")}, "static/style.css": {Data: []byte("c")}}
	c := fstest.MapFS{"static/app.js": {Data: []byte("a")}, "static/site.css": {Data: []byte("b")}}
	again := fstest.MapFS{"static/app.js": {Data: []byte("a")}, "static/style.css": {Data: []byte("b")}}
	if digest(a) == digest(b) || digest(a) == digest(c) || digest(a) != digest(again) {
		t.Errorf("digests %s %s %s: want each content its own, and the same for the same", digest(a), digest(b), digest(c))
	}
}
