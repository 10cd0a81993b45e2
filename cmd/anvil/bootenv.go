package main

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/anvilproj/anvil/internal/bootenv"
)

func newBootenvCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bootenv",
		Short: "Build the boot environment (kernel and initramfs) machines netboot into",
	}
	cmd.AddCommand(newBootenvBuildCmd())
	return cmd
}

func newBootenvBuildCmd() *cobra.Command {
	var cfg bootenv.Config
	var extras []string
	cmd := &cobra.Command{
		Use:   "build --kernel FILE --modules DIR|DEB --out DIR",
		Short: "Build vmlinuz-ARCH and initramfs-ARCH into a directory (nothing to do when up to date)",
		Long: `build writes OUT/vmlinuz-ARCH (the kernel) and OUT/initramfs-ARCH: anvil-agent
(the agent without the server; make build puts it next to anvil, else this
anvil binary is used, with a note) as /init, the kernel modules a machine
needs for its network and disks
(with their dependencies and modules.dep/modules.alias), /dev/console, and a
static busybox at /bin/busybox when /bin/busybox is one (Debian's
busybox-static). A second build with the same inputs does nothing.

--modules is a module directory (/lib/modules/RELEASE), a root directory
containing lib/modules/RELEASE, or a Debian linux-image .deb (then --kernel
may be left out: the package's boot/vmlinuz is used).

Module patterns: with a '/' they match the path below kernel/
("drivers/net/wireless/*"), otherwise the module name ("mlx5_*");
'*' matches across '/'. See docs/bootenv.md for the default selection.`,
		Example: `  anvil bootenv build --kernel .cache/kernel/vmlinuz --modules .cache/kernel/modules --out /var/lib/anvil/bootenv
  anvil bootenv build --modules linux-image-6.1.0-56-amd64_6.1.192-2_amd64.deb --out /var/lib/anvil/bootenv \
      --modules-include 'drivers/infiniband/*' --modules-exclude 'drivers/net/ethernet/mellanox/*' \
      --extra /lib/firmware/bnx2=/lib/firmware/bnx2`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, e := range extras {
				src, dst, ok := strings.Cut(e, "=")
				if !ok || src == "" || dst == "" {
					return fmt.Errorf("--extra %q: want SRC=DST, e.g. /lib/firmware/bnx2=/lib/firmware/bnx2", e)
				}
				cfg.Extras = append(cfg.Extras, bootenv.Extra{Src: src, Dst: dst})
			}
			cfg.Logger = slog.Default()
			res, err := bootenv.Build(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), res.Summary())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Kernel, "kernel", "", "kernel image (default: the .deb's, or ROOT/boot/vmlinuz-RELEASE)")
	f.StringVar(&cfg.Modules, "modules", "", "module directory, root directory containing lib/modules/RELEASE, or linux-image .deb (required)")
	f.StringVar(&cfg.OutDir, "out", "", "output directory, e.g. the server's --bootenv-dir (required)")
	f.StringVar(&cfg.Arch, "arch", bootenv.ArchX86_64, "architecture: x86_64 or aarch64 (amd64, arm64)")
	f.StringVar(&cfg.Anvil, "anvil", "", "binary to use as /init (default: anvil-agent next to this binary, else this one); must be static")
	f.StringVar(&cfg.Busybox, "busybox", bootenv.BusyboxAuto, "static busybox for a debug shell: FILE, auto ("+bootenv.DefaultBusybox+" if static) or none")
	f.StringArrayVar(&cfg.Include, "modules-include", nil, "also include modules matching GLOB (repeatable)")
	f.StringArrayVar(&cfg.Exclude, "modules-exclude", nil, "leave out modules matching GLOB and those needing them (repeatable)")
	f.BoolVar(&cfg.NoDefaultModules, "no-default-modules", false, "start from no module instead of the default selection (then use --modules-include)")
	f.StringArrayVar(&extras, "extra", nil, "put a file or directory into the boot environment: SRC=DST (repeatable)")
	f.StringVar(&cfg.Compression, "compress", bootenv.DefaultCompression, "initramfs compression: none, gzip, zstd, xz or lz4, optionally with a level (zstd-19)")
	f.StringVar(&cfg.ModuleCompression, "module-compression", bootenv.DefaultModuleCompression, "how each kernel module is stored: zstd (NAME.ko.zst, decompressed when loaded) or none")
	f.BoolVar(&cfg.Force, "force", false, "rebuild even if up to date")
	_ = cmd.MarkFlagRequired("modules")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}
