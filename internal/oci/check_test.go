package oci_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/anvilproj/anvil/internal/clock"
	"github.com/anvilproj/anvil/internal/oci"
	"github.com/anvilproj/anvil/internal/oci/ocitest"
	"github.com/anvilproj/anvil/internal/untar/untartest"
)

// TestCheck: an image the registry has passes, one it lacks, one behind a
// registry that is down and one behind a registry that does not answer
// fail with their cause; the image is reached through the mirror the
// settings name, as the agent would reach it.
func TestCheck(t *testing.T) {
	reg := ocitest.NewRegistry(t)
	reg.Push(t, reg.Ref("tinkerbell/actions/tool:v1"), ocitest.Image(t, v1.Config{Entrypoint: []string{"/tool"}},
		ocitest.Layer(t, []untartest.Entry{{Name: "tool", Mode: 0o755, Body: "x"}})))
	down := ocitest.NewRegistry(t)
	down.Server.Close()
	slow := ocitest.NewRegistry(t)
	slow.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		<-r.Context().Done()
		return true
	})
	settings, err := oci.Settings{Mirrors: map[string]string{
		"quay.io":  "http://" + reg.Host,
		"down.lab": "http://" + down.Host,
		"slow.lab": "http://" + slow.Host,
	}}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	c := oci.NewChecker(oci.CheckerConfig{Timeout: 500 * time.Millisecond})
	for _, tc := range []struct {
		image, want string
	}{
		{"quay.io/tinkerbell/actions/tool:v1", ""},
		{"quay.io/tinkerbell/actions/absent:v1", "the registry has no such image"},
		{"quay.io/tinkerbell/actions/tool:v2", "the registry has no such image"},
		{"down.lab/tool:v1", "cannot reach the registry"},
		{"slow.lab/tool:v1", "the registry did not answer within 500ms"},
	} {
		t.Run(tc.image, func(t *testing.T) {
			src, err := settings.Resolve(tc.image)
			if err != nil {
				t.Fatal(err)
			}
			err = c.Check(context.Background(), src)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Check(%s) = %v; want nil", tc.image, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Check(%s) = %v; want an error containing %q", tc.image, err, tc.want)
			}
		})
	}
}

// TestCheckCache: an answer is reused until its TTL has passed, then the
// registry is asked again; an image pushed meanwhile is then found.
func TestCheckCache(t *testing.T) {
	reg := ocitest.NewRegistry(t)
	ref := reg.Ref("tools/fw:1")
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	c := oci.NewChecker(oci.CheckerConfig{TTL: time.Minute, Clock: clk})
	src := oci.Source{Image: ref, Ref: ref, PlainHTTP: true}
	if err := c.Check(context.Background(), src); err == nil {
		t.Fatal("Check of an image not pushed yet = nil")
	}
	reg.Push(t, ref, ocitest.Image(t, v1.Config{}, ocitest.Layer(t, []untartest.Entry{{Name: "f", Body: "x"}})))
	heads := reg.Requests("HEAD /v2/tools/fw/manifests/1")
	if err := c.Check(context.Background(), src); err == nil {
		t.Error("within the TTL, Check did not reuse its answer")
	}
	if got := reg.Requests("HEAD /v2/tools/fw/manifests/1"); got != heads {
		t.Errorf("within the TTL the registry was asked again (%d HEADs, was %d)", got, heads)
	}
	clk.Advance(time.Minute)
	if err := c.Check(context.Background(), src); err != nil {
		t.Errorf("after the TTL, Check = %v; want nil (the image was pushed)", err)
	}
}
