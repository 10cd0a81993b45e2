package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"

	"github.com/anvilproj/anvil/internal/agentcmd"
	"github.com/anvilproj/anvil/internal/cli"
	"github.com/anvilproj/anvil/internal/config"
	"github.com/anvilproj/anvil/internal/freeport"
	"github.com/anvilproj/anvil/internal/testtool"
)

// clearEnv empties every ANVIL_* variable for the test (empty is unset),
// so that the developer's or CI's environment cannot change serve's
// configuration under it.
func clearEnv(t *testing.T) {
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, config.EnvPrefix) {
			t.Setenv(name, "")
		}
	}
}

// printConfig runs `anvil serve --print-config` and the args in-process
// and returns its output, parsed: each key's value and comment.
func printConfig(t *testing.T, args ...string) (map[string]any, map[string]string, string) {
	t.Helper()
	cmd := newRootCmd()
	var stdout, stderr bytes.Buffer
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SetArgs(append([]string{"serve", "--print-config"}, args...))
	if err := cmd.ExecuteContext(t.Context()); err != nil {
		t.Fatalf("serve --print-config %q: %v\n%s", args, err, stderr.String())
	}
	var values map[string]any
	if err := yaml.Unmarshal(stdout.Bytes(), &values); err != nil {
		t.Fatalf("print-config's output is not YAML: %v\n%s", err, stdout.String())
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(stdout.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	comments := map[string]string{}
	m := doc.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		comments[m.Content[i].Value] = m.Content[i+1].LineComment
	}
	return values, comments, stdout.String()
}

// serveErr runs `anvil serve` with args in-process and returns its error;
// it is meant for arguments refused before anything starts.
func serveErr(t *testing.T, args ...string) error {
	t.Helper()
	_, err := anvil(t, append([]string{"serve"}, args...)...)
	return err
}

// TestServeConfigKeys: every flag of serve, and the logging flags, is a key
// of print-config's output, and no other; the clients' flags are not, so
// their variables (ANVIL_SERVER, ANVIL_TOKEN, …) are not serve's.
func TestServeConfigKeys(t *testing.T) {
	clearEnv(t)
	values, _, _ := printConfig(t, "--config", writeFile(t, "# empty\n"))
	serve, _, err := newRootCmd().Find([]string{"serve"})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	serve.LocalFlags().VisitAll(func(f *pflag.Flag) {
		if f.Name != config.FlagConfig && f.Name != config.FlagPrintConfig {
			want = append(want, f.Name)
		}
	})
	want = append(want, "log-format", "log-level")
	var got []string
	for k := range values {
		got = append(got, k)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("keys %q;\nwant serve's flags %q", got, want)
	}
	for _, client := range []string{"server", "token", "token-file", "cacert", "insecure-skip-verify"} {
		if _, ok := values[client]; ok {
			t.Errorf("the client flag --%s is a key of serve's config", client)
		}
	}
	reserved := append(slices.Clone(cli.EnvVars), agentcmd.EnvToken)
	for _, k := range got {
		if slices.Contains(reserved, config.EnvName(k)) {
			t.Errorf("--%s's variable %s is one a client reads", k, config.EnvName(k))
		}
	}
}

// TestServeIgnoresClientVariables: the variables the clients and the
// agent read leave serve's configuration as it was, unwarned of, while a
// misspelt setting's variable is warned of.
func TestServeIgnoresClientVariables(t *testing.T) {
	clearEnv(t)
	for _, name := range append(slices.Clone(cli.EnvVars), agentcmd.EnvToken) {
		t.Setenv(name, "/tmp/x")
	}
	t.Setenv("ANVIL_HTTP_PROT", "1")
	_, comments, out := printConfig(t, "--config", writeFile(t, ""))
	for key, c := range comments {
		if c != "# default" {
			t.Errorf("%s: %s; want the default with only the clients' variables set", key, c)
		}
	}
	if !strings.Contains(out, "# Warning: ANVIL_HTTP_PROT is set but is no setting of anvil serve; ignored (did you mean ANVIL_HTTP_PORT?)") {
		t.Errorf("no warning of the misspelt variable:\n%s", out)
	}
	if strings.Count(out, "# Warning:") != 1 {
		t.Errorf("warnings of the clients' variables:\n%s", out)
	}
}

// TestServeSecretsMarked: every flag whose name says key, token,
// password, secret, credentials or kubeconfig is redacted, or is listed
// here with why it is not a secret, so that a new one cannot be printed by
// oversight.
func TestServeSecretsMarked(t *testing.T) {
	notSecret := map[string]string{
		"auth-key-file": "trusted public keys",
	}
	serve, _, err := newRootCmd().Find([]string{"serve"})
	if err != nil {
		t.Fatal(err)
	}
	looksSecret := regexp.MustCompile(`key|token|passw|secret|credential|auth-file|kubeconfig`)
	serve.LocalFlags().VisitAll(func(f *pflag.Flag) {
		if looksSecret.MatchString(f.Name) && !config.IsSecret(f) && notSecret[f.Name] == "" {
			t.Errorf("--%s looks like a secret but is not marked one (config.MarkSecret in serve.go)", f.Name)
		}
	})
	clearEnv(t)
	t.Setenv("ANVIL_SEAL_KEY_FILE", "/secret/seal.key")
	_, _, out := printConfig(t, "--config", writeFile(t, "console-host-key: /secret/host.key\nkubeconfig: /secret/kubeconfig\n"),
		"--tls-key", "/secret/tls.key", "--registry-auth-file", "/secret/auth.json")
	if strings.Contains(out, "/secret/") {
		t.Errorf("print-config shows a secret:\n%s", out)
	}
	if n := strings.Count(out, "secret, redacted"); n != 5 {
		t.Errorf("%d values redacted; want 5:\n%s", n, out)
	}
}

// TestServePrintConfigSources: a value from each source, and two sources
// disagreeing, as print-config shows them.
func TestServePrintConfigSources(t *testing.T) {
	clearEnv(t)
	file := writeFile(t, "# a site\nbind: 10.0.0.2\nhttp-port: 8080\ntls-san: [anvil.example.org, 192.0.2.10]\nboot-rate: 250\nlog-level: debug\n")
	t.Setenv(config.EnvConfig, file)
	t.Setenv("ANVIL_HTTP_PORT", "8081")
	t.Setenv("ANVIL_NO_DHCP", "true")
	t.Setenv("ANVIL_KERNEL_ARGS", "console=ttyS1,115200") // a comma in a list variable splits it
	t.Setenv("ANVIL_BMC_POLL_INTERVAL", "90s")
	values, comments, _ := printConfig(t, "--http-port", "8082")
	for key, want := range map[string]struct {
		value   any
		comment string
	}{
		"bind":              {"10.0.0.2", "# file line 2"},
		"http-port":         {8082, "# flag --http-port; overrides env ANVIL_HTTP_PORT, file line 3"},
		"tls-san":           {[]any{"anvil.example.org", "192.0.2.10"}, "# file line 4"},
		"boot-rate":         {250.0, "# file line 5"},
		"log-level":         {"debug", "# file line 6"},
		"no-dhcp":           {true, "# env ANVIL_NO_DHCP"},
		"kernel-args":       {[]any{"console=ttyS1", "115200"}, "# env ANVIL_KERNEL_ARGS"},
		"bmc-poll-interval": {"1m30s", "# env ANVIL_BMC_POLL_INTERVAL"},
		"grpc-port":         {42113, "# default"},
	} {
		if got := values[key]; !equalYAML(got, want.value) || comments[key] != want.comment {
			t.Errorf("%s: %#v %s; want %#v %s", key, got, comments[key], want.value, want.comment)
		}
	}
}

func equalYAML(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// TestServeConfigErrors: serve refuses a file with a typo, a wrong type
// or that is missing when named, saying where, before starting anything.
// TestServeKernelArgsKeepCommas: --kernel-args is repeatable and a comma
// stays in its argument (console=ttyS1,115200 is one kernel argument; it
// was split in two while the flag was a comma-separated list).
func TestServeKernelArgsKeepCommas(t *testing.T) {
	clearEnv(t)
	values, comments, _ := printConfig(t, "--kernel-args", "console=ttyS1,115200", "--kernel-args", "quiet")
	want := []any{"console=ttyS1,115200", "quiet"}
	if got := values["kernel-args"]; !equalYAML(got, want) || comments["kernel-args"] != "# flag --kernel-args" {
		t.Errorf("kernel-args: %#v %s; want %#v # flag --kernel-args", got, comments["kernel-args"], want)
	}
}

func TestServeConfigErrors(t *testing.T) {
	clearEnv(t)
	data := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		env  string
		want string
	}{
		{"typo", []string{"--config", writeFile(t, "bind: 127.0.0.1\nhttp-prot: 1\n")}, "", `:2: unknown key "http-prot" (did you mean "http-port"?)`},
		{"wrong type", []string{"--config", writeFile(t, "no-dhcp: yes\n")}, "", `:1: no-dhcp: want true or false, got "yes" (a string)`},
		{"missing named file", []string{"--config", filepath.Join(data, "none.yaml")}, "", "none.yaml does not exist"},
		{"missing file in ANVIL_CONFIG", nil, filepath.Join(data, "none.yaml"), "none.yaml does not exist"},
		{"bad variable", []string{"--config", writeFile(t, "")}, "", `ANVIL_GRPC_PORT="grpc": want an integer`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(config.EnvConfig, tc.env)
			if tc.name == "bad variable" {
				t.Setenv("ANVIL_GRPC_PORT", "grpc")
			}
			err := serveErr(t, append(tc.args, "--data-dir", filepath.Join(data, "store"))...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("serve = %v; want an error with %q", err, tc.want)
			}
			if _, err := os.Stat(filepath.Join(data, "store")); !os.IsNotExist(err) {
				t.Errorf("a refused configuration started the server: %s exists (%v)", filepath.Join(data, "store"), err)
			}
		})
	}
}

// TestServeConfigRoundTrip: serve's print-config output, fed back as its
// config file with no flags and no variables, prints the same values.
func TestServeConfigRoundTrip(t *testing.T) {
	clearEnv(t)
	t.Setenv("ANVIL_REGISTRY_MIRROR", "quay.io=http://10.0.0.2:5000,docker.io=http://10.0.0.2:5001")
	first, _, out := printConfig(t, "--config", writeFile(t, "path-prefix: /tink-stack/\nboot-client-rate: 12.5\n"),
		"--tls-san", "a.example", "--no-https", "--lease-duration", "20s", "--trusted-proxies", "10.0.0.0/24")
	t.Setenv("ANVIL_REGISTRY_MIRROR", "")
	second, comments, _ := printConfig(t, "--config", writeFile(t, out))
	if !equalYAML(first, second) {
		t.Errorf("after the round trip:\n%v\nwas\n%v", second, first)
	}
	if !strings.HasPrefix(comments["registry-mirror"], "# file line") {
		t.Errorf("the second run's registry-mirror came from %s; want the file", comments["registry-mirror"])
	}
}

// TestDocsConfigurationExample: docs/configuration.md's example file is
// one serve takes, and each of its keys is in effect.
func TestDocsConfigurationExample(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "```yaml\n")
	if !ok {
		t.Fatal("docs/configuration.md has no ```yaml example")
	}
	example, _, _ := strings.Cut(after, "```\n")
	clearEnv(t)
	values, comments, _ := printConfig(t, "--config", writeFile(t, example))
	var keys map[string]any
	if err := yaml.Unmarshal([]byte(example), &keys); err != nil {
		t.Fatal(err)
	}
	if len(keys) < 10 {
		t.Errorf("the example has %d keys; it should show a real site's", len(keys))
	}
	for k, v := range keys {
		if !strings.HasPrefix(comments[k], "# file line") {
			t.Errorf("%s: %s; want it from the file", k, comments[k])
		}
		if config.IsSecret(servesFlag(t, k)) {
			continue
		}
		if !equalYAML(values[k], normalise(v)) {
			t.Errorf("%s: in effect %#v; the example says %#v", k, values[k], v)
		}
	}
}

// normalise writes a value of the example as print-config would:
// durations as Go prints them.
func normalise(v any) any {
	if s, ok := v.(string); ok {
		if d, err := time.ParseDuration(s); err == nil {
			return d.String()
		}
	}
	return v
}

func servesFlag(t *testing.T, name string) *pflag.Flag {
	serve, _, err := newRootCmd().Find([]string{"serve"})
	if err != nil {
		t.Fatal(err)
	}
	if f := serve.LocalFlags().Lookup(name); f != nil {
		return f
	}
	return serve.InheritedFlags().Lookup(name)
}

// TestServeConfigFileTakesEffect runs the built anvil with a config file
// (the HTTP port, the listeners switched off, JSON logs) and one setting
// from the environment, and finds the HTTP API on the file's port and its
// log lines in JSON.
func TestServeConfigFileTakesEffect(t *testing.T) {
	dir := t.TempDir()
	bin := buildAnvil(t, dir)
	port := freePort(t)
	file := filepath.Join(dir, "anvil.yaml")
	if err := os.WriteFile(file, []byte(`# anvil serve on loopback, HTTP only
data-dir: `+filepath.Join(dir, "data")+`
bind: 127.0.0.1
http-port: `+strconv.Itoa(port)+`
log-format: json
no-tls: true
no-grpc: true
no-dhcp: true
no-tftp: true
no-syslog: true
no-metadata: true
no-console: true
`), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "--config", file)
	// The test's environment less its ANVIL_* variables, which would win
	// over the file, and one setting as a variable.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, config.EnvPrefix) })
	cmd.Env = append(cmd.Env, "ANVIL_NO_BMC=true")
	var stderr testtool.SyncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(exited) }()
	defer func() {
		select {
		case <-exited:
		default: // still running: the test failed early
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	// Each line is JSON (log-format: json in the file); one says the HTTP
	// API listens on the file's port.
	listening := func() bool {
		for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == "listening" && rec["service"] == "http" && rec["addr"] == addr {
				return true
			}
		}
		return false
	}
	testtool.WaitFor(t, "anvil to listen on the file's port "+addr, func() bool {
		select {
		case <-exited:
			t.Fatalf("anvil ended (%v) before it listened:\n%s", waitErr, stderr.String())
		default:
		}
		return listening()
	})
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("GET /healthz on the file's port: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz: %s", resp.Status)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testtool.Receive(t, exited, "anvil to exit after SIGTERM")
	if waitErr != nil {
		t.Errorf("anvil serve after SIGTERM: %v", waitErr)
	}
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		if !json.Valid([]byte(line)) {
			t.Errorf("a log line that is not JSON (log-format: json in the file): %q", line)
		}
	}
	if strings.Contains(stderr.String(), `"service":"grpc"`) || !strings.Contains(stderr.String(), "config file read") {
		t.Errorf("the file's no-grpc did not take, or its reading was not logged:\n%s", stderr.String())
	}
}

// buildAnvil builds this command into dir and returns its path, for
// tests that run `anvil serve` as a process of its own (signals, its
// environment).
func buildAnvil(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "anvil")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// freePort returns a TCP port free on 127.0.0.1 now, for a config file to
// name; anvil takes it again at once.
func freePort(t *testing.T) int {
	t.Helper()
	p, err := freeport.Loopback()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// writeFile writes a config file of text to a new temporary directory.
func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "anvil.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
