package bmc

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
)

// explainTransport explains an error of an HTTP(S) BMC's transport (TLS,
// time, refused connection, the wrong scheme) for the providers that
// speak HTTP (Redfish, Intel AMT); what names the call, portOption the
// Machine's port field, schemeHint what to do about a scheme mismatch.
// Other errors are wrapped as they are.
func explainTransport(what string, err error, portOption, schemeHint string) error {
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var timeout interface{ Timeout() bool }
	switch {
	case errors.As(err, &unknownCA):
		return fmt.Errorf("%s: %w (the BMC's certificate is not signed by a CA Anvil trusts: give the CA with anvil serve --bmc-ca-file, or set the Machine's insecureTLS)", what, err)
	case errors.As(err, &hostname), errors.As(err, &invalid):
		return fmt.Errorf("%s: %w (the BMC's certificate does not fit: fix it, or set the Machine's insecureTLS)", what, err)
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &timeout) && timeout.Timeout():
		return fmt.Errorf("%s: %w (the BMC did not answer in time)", what, err)
	case strings.Contains(err.Error(), "connection refused"):
		return fmt.Errorf("%s: %w (nothing listens there: check the Machine's host and port, %s)", what, err, portOption)
	case strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"),
		strings.Contains(err.Error(), "malformed HTTP response"):
		return fmt.Errorf("%s: %w (%s)", what, err, schemeHint)
	}
	return fmt.Errorf("%s: %w", what, err)
}
