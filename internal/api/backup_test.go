package api_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/audit"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store/bolt"
)

// backup takes an online backup as who, returning the bytes and the
// first chunk's header.
func backup(t *testing.T, e *env, who string) ([]byte, *v1.BackupChunk, error) {
	data, head, _, err := backupChunks(t, e, who)
	return data, head, err
}

func backupChunks(t *testing.T, e *env, who string) ([]byte, *v1.BackupChunk, int, error) {
	t.Helper()
	c := anvilv1connect.NewBackupServiceClient(e.http, e.url, connect.WithGRPC())
	stream, err := c.Backup(t.Context(), as(who, &v1.BackupRequest{}))
	if err != nil {
		return nil, nil, 0, err
	}
	defer stream.Close()
	n := 0
	var buf bytes.Buffer
	var head *v1.BackupChunk
	for stream.Receive() {
		if head == nil {
			head = stream.Msg()
		}
		buf.Write(stream.Msg().GetData())
		n++
	}
	return buf.Bytes(), head, n, stream.Err()
}

// An admin gets a consistent copy of the store while it serves: a store
// file that opens with every object, of the size the first chunk said;
// anyone else is refused; both calls are audited.
func TestBackupOnline(t *testing.T) {
	e, al := newAuthEnv(t)
	data, head, err := backup(t, e, "admin")
	if err != nil {
		t.Fatalf("Backup as admin: %v", err)
	}
	if head.GetSize() != int64(len(data)) || head.GetSchema() != bolt.SchemaVersion {
		t.Fatalf("header %+v, got %d bytes", head, len(data))
	}
	p := filepath.Join(t.TempDir(), "backup.db")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := bolt.CheckFile(p)
	if err != nil {
		t.Fatalf("the backup is no store: %v", err)
	}
	if len(c.Objects[model.KindHardware]) != 2 || len(c.Objects[model.KindWorkflow]) != 1 {
		t.Errorf("backup holds %d Hardware, %d Workflows; want 2, 1", len(c.Objects[model.KindHardware]), len(c.Objects[model.KindWorkflow]))
	}

	_, _, err = backup(t, e, "acme-op")
	denied(t, "Backup as an operator", err, connect.CodePermissionDenied)

	recs, err := al.List(audit.Filter{Procedure: "BackupService/Backup"})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Subject != "admin" || recs[0].Outcome != "ok" ||
		recs[1].Subject != "acme-op" || recs[1].Outcome != "permission_denied" {
		t.Fatalf("audit records %+v, want admin ok then acme-op permission_denied", recs)
	}
}

// A store larger than a chunk comes in several, whole.
func TestBackupOnlineChunks(t *testing.T) {
	e, _ := newAuthEnv(t)
	for i := range 300 {
		h := &model.Hardware{ObjectMeta: model.ObjectMeta{Name: fmt.Sprintf("big-%d", i),
			Annotations: map[string]string{"note": strings.Repeat("x", 8<<10)}}}
		if _, err := e.st.Create(t.Context(), h); err != nil {
			t.Fatal(err)
		}
	}
	data, head, n, err := backupChunks(t, e, "admin")
	if err != nil {
		t.Fatal(err)
	}
	if n < 2 || head.GetSize() != int64(len(data)) {
		t.Fatalf("%d chunks, %d bytes, header says %d", n, len(data), head.GetSize())
	}
	p := filepath.Join(t.TempDir(), "backup.db")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := bolt.CheckFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(c.Objects[model.KindHardware]); got != 302 {
		t.Fatalf("backup holds %d Hardware, want 302", got)
	}
}
