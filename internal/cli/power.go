package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/bmcjob"
	"github.com/anvilproj/anvil/internal/model"
)

// bmcFlags are the flags power and bootdev share.
type bmcFlags struct {
	namespace string
	wait      time.Duration
}

func (f *bmcFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&f.namespace, "namespace", "n", model.DefaultNamespace, "namespace")
	cmd.Flags().DurationVar(&f.wait, "wait", 2*time.Minute, "how long to wait for the job to finish (0: do not wait)")
}

func newPowerCmd() *cobra.Command {
	var f bmcFlags
	cmd := &cobra.Command{
		Use:   "power on|off|soft|cycle|reset|status hardware/NAME|machine/NAME",
		Short: "Power a machine through its BMC, or read its power state (runs a BMC Job)",
		Long: `Power a machine through its BMC. The command creates a Job
(bmc.tinkerbell.org/v1alpha1) with one task, waits for the server to run it,
and prints the outcome; the Job stays, so its progress and any error are in
` + "`anvil describe job/NAME`" + `. A Hardware names its BMC with spec.bmcRef.`,
		Example: `  anvil power status hardware/node07
  anvil power on hardware/node07
  anvil power cycle machine/bmc-node07`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			action := args[0]
			if err := bmcjob.CheckPower(action); err != nil {
				return err
			}
			return runBMCJob(cmd, &f, args[1], true, func(machine string) (*model.Job, error) {
				return bmcjob.Power(f.namespace, machine, action, bmcjob.CreatedByCLI)
			})
		},
	}
	f.add(cmd)
	return cmd
}

func newBootdevCmd() *cobra.Command {
	var f bmcFlags
	var efi, persistent bool
	cmd := &cobra.Command{
		Use:   "bootdev pxe|disk|cdrom|bios|safe hardware/NAME|machine/NAME",
		Short: "Set the device a machine boots from next, through its BMC (runs a BMC Job)",
		Example: `  anvil bootdev pxe hardware/node07 --efi
  anvil bootdev disk machine/bmc-node07 --persistent`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			dev := args[0]
			if !contains(model.BootDevices, dev) {
				return fmt.Errorf("unknown boot device %q (want one of %s)", dev, strings.Join(model.BootDevices, ", "))
			}
			task := model.BMCAction{OneTimeBootDeviceAction: &model.OneTimeBootDeviceAction{
				Devices: []string{dev}, EFIBoot: efi, Persistent: persistent}}
			return runBMCJob(cmd, &f, args[1], false, func(machine string) (*model.Job, error) {
				return bmcjob.New(f.namespace, machine, "bootdev-"+dev, bmcjob.CreatedByCLI, task), nil
			})
		},
	}
	f.add(cmd)
	cmd.Flags().BoolVar(&efi, "efi", false, "boot in UEFI mode (IPMI's boot flags: EFI boot type)")
	cmd.Flags().BoolVar(&persistent, "persistent", false, "keep the device for every later boot, not the next one only")
	return cmd
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// runBMCJob creates the Job newJob makes for the target's Machine
// (bmcjob decides its shape, for the UI too), waits for it and prints the
// outcome (and, for power, the power state).
func runBMCJob(cmd *cobra.Command, f *bmcFlags, target string, power bool, newJob func(machine string) (*model.Job, error)) error {
	c, err := newClients(cmd)
	if err != nil {
		return err
	}
	ctx := ctx(cmd)
	machine, err := c.machineOf(ctx, f.namespace, target)
	if err != nil {
		return err
	}
	job, err := newJob(machine)
	if err != nil {
		return err
	}
	msg, err := bmcjob.Message(job)
	if err != nil {
		return err
	}
	if _, err := c.bmcJobs.Create(ctx, connect.NewRequest(&v1.CreateBmcJobRequest{Job: msg})); err != nil {
		return c.explain(err)
	}
	w := cmd.OutOrStdout()
	if f.wait <= 0 {
		fmt.Fprintf(w, "job/%s created\n", job.Name)
		return nil
	}
	done, err := c.waitBMCJob(ctx, f.namespace, job.Name, f.wait)
	if err != nil {
		return err
	}
	return reportBMCJob(w, c, ctx, done, machine, target, power)
}

// reportBMCJob prints a finished Job's outcome; a failed Job is an error
// (exit code 1) carrying its message.
func reportBMCJob(w io.Writer, c *clients, ctx context.Context, j *model.Job, machine, target string, power bool) error {
	for _, cond := range j.Status.Conditions {
		if cond.Type == model.ConditionFailed && cond.Status == model.ConditionTrue {
			return fmt.Errorf("job/%s failed: %s", j.Name, cond.Message)
		}
	}
	fmt.Fprintf(w, "job/%s: %s\n", j.Name, bmcState(j.Status.Conditions))
	if !power {
		return nil
	}
	o, err := c.ops(model.KindMachine).get(ctx, j.Namespace, machine)
	if err != nil {
		return c.explain(err)
	}
	m := o.(*model.Machine)
	name := "machine/" + machine
	if !strings.HasPrefix(target, "machine/") {
		name = target + " (machine/" + machine + ")"
	}
	fmt.Fprintf(w, "%s: power %s\n", name, orDash(m.Status.PowerState))
	return nil
}

// machineOf resolves "hardware/NAME" (through spec.bmcRef) or
// "machine/NAME" to a Machine name.
func (c *clients) machineOf(ctx context.Context, ns, target string) (string, error) {
	kindArg, name, ok := strings.Cut(target, "/")
	if !ok || name == "" {
		return "", fmt.Errorf("%q: want hardware/NAME or machine/NAME", target)
	}
	kind, err := model.ParseKind(kindArg)
	if err != nil {
		return "", err
	}
	machine := name
	switch kind {
	case model.KindMachine:
	case model.KindHardware:
		o, err := c.ops(model.KindHardware).get(ctx, ns, name)
		if err != nil {
			return "", c.explain(err)
		}
		if machine, err = bmcjob.MachineOf(o.(*model.Hardware)); err != nil {
			return "", err
		}
	default:
		return "", fmt.Errorf("%q: power and bootdev take hardware/NAME or machine/NAME", target)
	}
	// Said here, at once: the executor would wait for the Machine to be
	// applied (bmc.Config.RefGrace) before failing the Job.
	if _, err := c.ops(model.KindMachine).get(ctx, ns, machine); err != nil {
		return "", fmt.Errorf("%s: %w", target, c.explain(err))
	}
	return machine, nil
}

// waitBMCJob polls the Job until it has finished, or fails after wait.
func (c *clients) waitBMCJob(ctx context.Context, ns, name string, wait time.Duration) (*model.Job, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		o, err := c.ops(model.KindJob).get(ctx, ns, name)
		if err != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				break
			}
			return nil, c.explain(err)
		}
		if j := o.(*model.Job); j.Finished() {
			return j, nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
			continue
		}
		break
	}
	return nil, fmt.Errorf("job/%s did not finish within %s (is the server's BMC executor off, --no-bmc?): see `anvil describe job/%s`", name, wait, name)
}
