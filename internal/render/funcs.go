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

// toJSON is Sprig's toJson, under the name Ignition users expect.
var toJSON = sprig.GenericFuncMap()["toJson"]

// funcMap returns the functions a config template may call besides
// Sprig's hermetic set (bounded by internal/tmplbudget): secret (bound to
// data's namespace and secrets), sshPublicKey, toJSON and toYaml.
func funcMap(data Data, secrets SecretSource) template.FuncMap {
	return template.FuncMap{
		"toJSON":       toJSON,
		"toYaml":       toYaml,
		"sshPublicKey": sshPublicKey,
		"secret": func(name, kind string) (string, error) {
			if secrets == nil {
				return "", errors.New("secret: no secret store is configured")
			}
			v, err := secrets.Secret(data.Namespace, name, kind)
			if err != nil {
				return "", fmt.Errorf("secret %q: %w", name, err)
			}
			return v, nil
		},
	}
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
