package api

import (
	"context"
	"errors"
	"io"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/version"
)

// backupChunk is the size of each BackupChunk's data: well under the
// default message limits of gRPC clients (4 MiB).
const backupChunk = 1 << 20

// backupService streams a consistent copy of the embedded store while
// the server serves (docs/upgrades.md).
type backupService struct{ s *Services }

// Backup sends the store's copy in chunks. Admins only: the copy holds
// every organisation's objects. The call is audited, refused or not,
// although it changes nothing: who took a copy of everything matters.
func (b backupService) Backup(ctx context.Context, req *connect.Request[v1.BackupRequest], stream *connect.ServerStream[v1.BackupChunk]) (err error) {
	defer func() { guard(b).audit(ctx, req.Spec().Procedure, req.Msg, req.Peer().Addr, err) }()
	if err := authorize(ctx, auth.Write, ""); err != nil {
		return err
	}
	bk, ok := b.s.cfg.Store.(store.Backuper)
	if !ok {
		return connect.NewError(connect.CodeFailedPrecondition,
			errors.New("this server's store cannot be backed up through Anvil: it is the Kubernetes API, whose etcd the cluster's own tools back up"))
	}
	w := &chunkWriter{stream: stream}
	err = bk.Backup(func(size int64, schema int) (io.Writer, error) {
		w.first = &v1.BackupChunk{Size: size, Schema: int32(schema), ServerVersion: version.Get().Version}
		return w, nil
	})
	if err == nil {
		err = w.flush()
	}
	return b.s.toConnect(err)
}

// chunkWriter sends what it is written as BackupChunks of backupChunk
// bytes, the first carrying the copy's size and schema.
type chunkWriter struct {
	stream *connect.ServerStream[v1.BackupChunk]
	first  *v1.BackupChunk
	buf    []byte
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		take := min(len(p), backupChunk-len(w.buf))
		w.buf = append(w.buf, p[:take]...)
		p = p[take:]
		if len(w.buf) == backupChunk {
			if err := w.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

// flush sends what is buffered (and the first chunk's header even when
// the copy is empty).
func (w *chunkWriter) flush() error {
	if len(w.buf) == 0 && w.first == nil {
		return nil
	}
	c := &v1.BackupChunk{}
	if w.first != nil {
		c, w.first = w.first, nil
	}
	c.Data = w.buf
	err := w.stream.Send(c)
	w.buf = make([]byte, 0, backupChunk)
	return err
}
