package enroll

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store/bolt"
)

// BenchmarkPass500: a pass over 500 discovered machines (a discovery
// storm), ten rule sets of which the last matches, every machine enrolled:
// the cost per machine of matching, the render check and the two writes.
// The dry-run variant is the matching alone.
func BenchmarkPass500(b *testing.B) {
	for _, dry := range []bool{true, false} {
		b.Run(fmt.Sprintf("dryRun=%t", dry), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				st, err := bolt.Open(filepath.Join(b.TempDir(), "anvil.db"), bolt.Options{})
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				objs := []model.Object{template("default", "install")}
				for i := range 9 {
					objs = append(objs, ruleSet("default", fmt.Sprintf("r%d", i), int64(10+i), nil, ruleHPE, ruleNoSuchS))
				}
				objs = append(objs, ruleSet("default", "dell", 0, nil, ruleHDD, ruleDell))
				for i := range 500 {
					hw := dellHardware("default", fmt.Sprintf("d%03d", i), map[string]string{model.LabelDiscovered: "true"})
					hw.Spec.Interfaces[0].DHCP.MAC = fmt.Sprintf("52:54:00:00:%02x:%02x", i/256, i%256)
					objs = append(objs, hw)
				}
				if _, err := st.Apply(ctx, objs); err != nil {
					b.Fatal(err)
				}
				e := New(Config{Store: st, Logger: slog.New(slog.DiscardHandler)})
				b.StartTimer()
				res, err := e.Pass(ctx, "", dry)
				b.StopTimer()
				if err != nil || len(res) != 500 {
					b.Fatalf("%d results, %v", len(res), err)
				}
				st.Close()
				b.StartTimer()
			}
		})
	}
}
