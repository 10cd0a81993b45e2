package browser_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/agentsim"
	"github.com/anvilproj/anvil/internal/bmc"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/secrets"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/testtool"
	"github.com/anvilproj/anvil/test/redfishsim"
)

// withBMC adds machine rack1-node08, whose spec.bmcRef names Machine
// bmc-node08: a Redfish BMC (test/redfishsim, in this process) powering
// an in-memory machine that starts off, with its sealed credentials. It
// runs the BMC Job executor and the power poller anvil serve runs, with
// the Redfish provider trusting the simulator's certificate.
func withBMC(t *testing.T) (serveOption, *redfishsim.FakeMachine) {
	t.Helper()
	const user, password = "root", "calvin"
	fm := &redfishsim.FakeMachine{}
	sim := redfishsim.Start(t, redfishsim.Config{Username: user, Password: password,
		Systems: []redfishsim.System{{ID: "1", Machine: fm}}})
	pool, err := bmc.LoadCAFile(sim.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	sealer, err := secrets.OpenSealer(filepath.Join(t.TempDir(), secrets.KeyFileName), nil)
	if err != nil {
		t.Fatal(err)
	}
	secret := &model.Secret{TypeMeta: model.TypeMeta{APIVersion: "v1", Kind: model.KindSecret},
		ObjectMeta: model.ObjectMeta{Namespace: "acme", Name: "bmc-node08-auth"}, Type: "kubernetes.io/basic-auth",
		Data: map[string]string{"username": base64.StdEncoding.EncodeToString([]byte(user)),
			"password": base64.StdEncoding.EncodeToString([]byte(password))}}
	if err := sealer.Seal(secret); err != nil {
		t.Fatal(err)
	}
	objs := []model.Object{
		secret,
		&model.Machine{TypeMeta: model.TypeMeta{APIVersion: model.BMCAPIVersion, Kind: model.KindMachine},
			ObjectMeta: model.ObjectMeta{Namespace: "acme", Name: "bmc-node08"},
			Spec: model.MachineSpec{Connection: model.Connection{Host: sim.Host, Port: sim.Port,
				AuthSecretRef:   model.SecretReference{Name: secret.Name, Namespace: "acme"},
				ProviderOptions: &model.ProviderOptions{Redfish: &model.RedfishOptions{Port: sim.Port}}}}},
		&model.Hardware{TypeMeta: model.TypeMeta{APIVersion: model.APIVersion, Kind: model.KindHardware},
			ObjectMeta: model.ObjectMeta{Namespace: "acme", Name: "rack1-node08"},
			Spec: model.HardwareSpec{BMCRef: &model.LocalObjectReference{Kind: "Machine", Name: "bmc-node08"},
				Interfaces: []model.Interface{{DHCP: &model.DHCP{MAC: "52:54:00:0d:00:08",
					IP: &model.IP{Address: "10.0.4.8", Netmask: "255.255.255.0"}}}}}},
	}
	run := func(ctx context.Context, st store.Store) {
		ex := bmc.New(bmc.Config{Store: st, Unseal: sealer.Open, Providers: []bmc.Provider{bmc.Redfish{RootCAs: pool}},
			PollInterval: 50 * time.Millisecond})
		done := make(chan error, 1)
		go func() { done <- ex.Poller(bmc.PollConfig{Interval: time.Minute}).Run(ctx) }()
		_ = ex.Run(ctx) // ends with ctx
		<-done
	}
	return func(c *serveConfig) {
		c.objects = append(c.objects, objs...)
		c.run = append(c.run, run)
	}, fm
}

// waitText waits until the element id's text is want.
func waitText(t *testing.T, ctx context.Context, id, want, what string) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.Search(`//*[@id="`+id+`"][normalize-space(text())="`+want+`"]`))); err != nil {
		t.Fatalf("%s: waiting for #%s to say %s: %v", what, id, want, err)
	}
}

// TestOperatorActions: an operator cancels a running simulated install
// and sees CANCELLING, then CANCELLED, pushed to the workflow page; powers
// a machine on through its (simulated Redfish) BMC and sees the Job
// complete and the power state turn on, pushed to the machine page; and
// denies the first machine's netboot.
func TestOperatorActions(t *testing.T) {
	bmcOpt, fm := withBMC(t)
	base := serve(t, bmcOpt)
	ctx := browser(t)
	login(t, ctx, base, "op-token")

	// Cancel: reprovision, let the agent start, press Cancel.
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/ui/hardware/acme/rack1-node07"),
		chromedp.Click(chromedp.CSS(`form[action$="/reprovision"] button`)),
		chromedp.WaitVisible(chromedp.CSS(`#progress[data-live="1"]`)),
	); err != nil {
		t.Fatalf("reprovision: %v", err)
	}
	agentDone := make(chan error, 1)
	go func() {
		res, err := agentsim.Run(ctx, agentsim.Config{
			Client:  anvilv1connect.NewAgentServiceClient(http.DefaultClient, base),
			AgentID: mac, ActionTime: 1500 * time.Millisecond, Wait: time.Second,
		})
		if err == nil && res.WorkflowState != "CANCELLED" {
			t.Errorf("the agent saw the workflow end %s; want CANCELLED", res.WorkflowState)
		}
		agentDone <- err
	}()
	waitText(t, ctx, "wf-state", "RUNNING", "cancel")
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`#cancel input[name="reason"]`), "wrong image"),
		chromedp.Click(chromedp.CSS(`#cancel button`)),
	); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	waitText(t, ctx, "wf-state", "CANCELLING", "cancel")
	screenshot(t, ctx, "workflow-cancelling.png")
	waitText(t, ctx, "wf-state", "CANCELLED", "cancel")
	if err := chromedp.Do(ctx, chromedp.WaitNotPresent(chromedp.ID("cancel"))); err != nil {
		t.Errorf("the Cancel form stays on a cancelled workflow's page: %v", err)
	}
	screenshot(t, ctx, "workflow-cancelled.png")
	if err := testtool.Receive(t, agentDone, "the simulated agent to stop"); err != nil {
		t.Errorf("agent: %v", err)
	}

	// Power on: the poller has read the machine off; the press makes a
	// BMC Job, the executor runs it against the Redfish BMC.
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/ui/hardware/acme/rack1-node08")); err != nil {
		t.Fatal(err)
	}
	waitText(t, ctx, "power-state", "off", "power")
	screenshot(t, ctx, "hardware-power-off.png")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`button[name="action"][value="on"]`))); err != nil {
		t.Fatalf("power on: %v", err)
	}
	waitText(t, ctx, "power-job-state", "Completed", "power")
	waitText(t, ctx, "power-state", "on", "power")
	if on, _ := fm.PoweredOn(); !on {
		t.Errorf("the page says on, the simulated machine is off")
	}
	screenshot(t, ctx, "hardware-power-on.png")

	// Netboot: the operator denies it (HardwareService.SetNetboot wants
	// provision, as reprovision does).
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/ui/hardware/acme/rack1-node07")); err != nil {
		t.Fatal(err)
	}
	// Reprovision allowed netboot; cancelling left it so (docs/jobs.md).
	waitText(t, ctx, "netboot-state", "allowed on every interface (1)", "netboot")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`button[name="allow"][value="false"]`))); err != nil {
		t.Fatalf("deny netboot: %v", err)
	}
	waitText(t, ctx, "netboot-state", "denied on every interface (1)", "netboot")
	screenshot(t, ctx, "hardware-netboot-denied.png")
}
