package render

import (
	"crypto"
	"errors"
	"fmt"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig/v3"
	"golang.org/x/crypto/ssh"
	k8syaml "sigs.k8s.io/yaml"
)

// funcMap returns the functions a template may call: Sprig's hermetic set
// (as internal/workflow uses), with the size-taking ones bounded, plus secret
// (bound to data's namespace and secrets), sshPublicKey, toJSON and toYaml.
func funcMap(data Data, secrets SecretSource) template.FuncMap {
	f := sprig.HermeticTxtFuncMap()
	f["repeat"] = repeat
	f["indent"] = indent
	f["nindent"] = func(n int, s string) (string, error) {
		r, err := indent(n, s)
		return "\n" + r, err
	}
	f["until"] = func(n int) ([]int, error) { return untilStep(0, n, 1) }
	f["untilStep"] = untilStep
	f["seq"] = seq
	f["toJSON"] = f["toJson"]
	f["toYaml"] = toYaml
	f["sshPublicKey"] = sshPublicKey
	f["secret"] = func(name, kind string) (string, error) {
		if secrets == nil {
			return "", errors.New("secret: no secret store is configured")
		}
		v, err := secrets.Secret(data.Namespace, name, kind)
		if err != nil {
			return "", fmt.Errorf("secret %q: %w", name, err)
		}
		return v, nil
	}
	return f
}

// repeat is Sprig's repeat, refusing output beyond MaxOutputSize.
func repeat(n int, s string) (string, error) {
	if n < 0 || (len(s) > 0 && n > MaxOutputSize/len(s)) {
		return "", fmt.Errorf("repeat: %d × %d bytes is more than the output limit", n, len(s))
	}
	return strings.Repeat(s, n), nil
}

// indent is Sprig's indent, refusing output beyond MaxOutputSize.
func indent(n int, s string) (string, error) {
	lines := strings.Count(s, "\n") + 1
	if n < 0 || n > MaxOutputSize/lines {
		return "", fmt.Errorf("indent: %d spaces × %d lines is more than the output limit", n, lines)
	}
	pad := strings.Repeat(" ", n)
	return pad + strings.ReplaceAll(s, "\n", "\n"+pad), nil
}

// untilStep is Sprig's untilStep, refusing lists longer than MaxRangeLiteral.
func untilStep(start, stop, step int) ([]int, error) {
	if step == 0 || (step > 0 && start >= stop) || (step < 0 && start <= stop) {
		return []int{}, nil
	}
	n := (int64(stop) - int64(start)) / int64(step)
	if n > MaxRangeLiteral {
		return nil, fmt.Errorf("untilStep: %d elements, more than %d", n, MaxRangeLiteral)
	}
	v := make([]int, 0, n+1)
	for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
		v = append(v, i)
	}
	return v, nil
}

// seq is Sprig's seq (like the seq command: "seq 5", "seq 2 5", "seq 1 2
// 9"), bounded like untilStep, returning space-separated numbers.
func seq(params ...int) (string, error) {
	start, step, end := 1, 1, 0
	switch len(params) {
	case 1:
		end = params[0]
	case 2:
		start, end = params[0], params[1]
	case 3:
		start, step, end = params[0], params[1], params[2]
	default:
		return "", errors.New("seq: want 1 to 3 numbers")
	}
	if step == 0 {
		return "", errors.New("seq: step is 0")
	}
	if start > end && step > 0 {
		step = -step
	}
	var stop int64
	if step > 0 {
		stop = int64(end) + 1
	} else {
		stop = int64(end) - 1
	}
	if stop > int64(int(^uint(0)>>1)) || stop < -int64(int(^uint(0)>>1))-1 {
		return "", errors.New("seq: out of range")
	}
	v, err := untilStep(start, int(stop), step)
	if err != nil {
		return "", err
	}
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, " "), nil
}

// toYaml renders v as YAML (through its JSON encoding), without the
// trailing newline.
func toYaml(v any) (string, error) {
	b, err := k8syaml.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("toYaml: %w", err)
	}
	return strings.TrimSuffix(string(b), "\n"), nil
}

// sshPublicKey returns the authorized_keys line ("ssh-ed25519 AAAA…") of an
// OpenSSH private key, such as an ssh-ed25519 secret.
func sshPublicKey(privatePEM string) (string, error) {
	k, err := ssh.ParseRawPrivateKey([]byte(privatePEM))
	if err != nil {
		return "", fmt.Errorf("sshPublicKey: %w", err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return "", fmt.Errorf("sshPublicKey: unsupported key type %T", k)
	}
	sp, err := ssh.NewPublicKey(signer.Public())
	if err != nil {
		return "", fmt.Errorf("sshPublicKey: %w", err)
	}
	return strings.TrimSuffix(string(ssh.MarshalAuthorizedKey(sp)), "\n"), nil
}
