package cli

import (
	"errors"
	"fmt"
	"io"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/atomicfile"
)

// OnlineBackup writes the copy of the store the server at --server
// sends (BackupService.Backup) to path, whole or not at all (mode 0600:
// it holds every object, sealed Secrets included), and returns the first
// chunk's header. `anvil backup --online` is its command (cmd/anvil: it
// shares the offline backup's flags and checks).
func OnlineBackup(cmd *cobra.Command, path string) (*v1.BackupChunk, error) {
	c, err := newClients(cmd)
	if err != nil {
		return nil, err
	}
	client := anvilv1connect.NewBackupServiceClient(c.http, c.server, c.opts...)
	var head *v1.BackupChunk
	err = atomicfile.WriteFrom(path, 0o600, func(w io.Writer) error {
		stream, err := client.Backup(ctx(cmd), connect.NewRequest(&v1.BackupRequest{}))
		if err != nil {
			return c.explain(err)
		}
		defer stream.Close()
		var n int64
		for stream.Receive() {
			if head == nil {
				head = stream.Msg()
			}
			k, err := w.Write(stream.Msg().GetData())
			n += int64(k)
			if err != nil {
				return err
			}
		}
		if err := stream.Err(); err != nil {
			return c.explain(err)
		}
		if head == nil {
			return errors.New("the server sent no backup")
		}
		if n != head.GetSize() {
			return fmt.Errorf("the server sent %d bytes of a %d-byte backup", n, head.GetSize())
		}
		return nil
	})
	return head, err
}
