package model

import (
	"encoding/base64"
	"fmt"
	"regexp"
)

// CoreAPIVersion is the group/version of Kubernetes' core kinds; Anvil
// takes one of them, Secret, for the BMC credentials a Machine's
// authSecretRef names.
const CoreAPIVersion = "v1"

// KindSecret is the core v1 Secret.
const KindSecret = "Secret"

// Secret keys a Machine's authSecretRef must hold.
const (
	SecretUsernameKey = "username"
	SecretPasswordKey = "password"
)

// Secret is a core v1 Secret as a manifest gives it: Data holds base64
// values, StringData plain ones (they win on the same key).
//
// The store never holds Data or StringData: the API seals them (see
// internal/secrets.SealSecret) into Sealed, an AEAD ciphertext, and lists
// the key names in Keys. Every read through the API shows the keys only.
type Secret struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Type       string            `json:"type,omitempty"`
	Immutable  *bool             `json:"immutable,omitempty"`
	Data       map[string]string `json:"data,omitempty"`
	StringData map[string]string `json:"stringData,omitempty"`

	// Sealed is Anvil's: the encrypted data, set by the server.
	Sealed string `json:"sealed,omitempty"`
	// Keys is Anvil's: the names of the sealed data's keys, sorted.
	Keys []string `json:"keys,omitempty"`
}

// secretKeyRE is Kubernetes' rule for a Secret's data keys.
var secretKeyRE = regexp.MustCompile(`^[-._a-zA-Z0-9]+$`)

// Plain returns the Secret's values, StringData over Data, decoded. Errors
// name the key, never the value.
func (s *Secret) Plain() (map[string][]byte, error) {
	out := make(map[string][]byte, len(s.Data)+len(s.StringData))
	for _, k := range sortedKeys(s.Data) {
		b, err := base64.StdEncoding.DecodeString(s.Data[k])
		if err != nil {
			return nil, fmt.Errorf("data.%s: not valid base64 (put plain text under stringData instead)", k)
		}
		out[k] = b
	}
	for k, v := range s.StringData {
		out[k] = []byte(v)
	}
	return out, nil
}

func validateSecret(s *Secret, add addFunc) {
	if s.Sealed != "" && (len(s.Data) > 0 || len(s.StringData) > 0) {
		add("sealed", "set by the server; a manifest gives data or stringData")
	}
	for _, part := range []struct {
		field string
		m     map[string]string
	}{{"data", s.Data}, {"stringData", s.StringData}} {
		for _, k := range sortedKeys(part.m) {
			if !secretKeyRE.MatchString(k) || len(k) > 253 {
				add(part.field, "key %q: want letters, digits, '-', '_' or '.'", k)
			}
		}
	}
	for _, k := range sortedKeys(s.Data) {
		if _, err := base64.StdEncoding.DecodeString(s.Data[k]); err != nil {
			add("data."+k, "not valid base64 (put plain text under stringData instead)")
		}
	}
}
