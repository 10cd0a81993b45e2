package kubetest

import "k8s.io/client-go/rest"

// RESTConfig returns a client-go configuration for the cluster's admin
// user. Its client-side rate limit is lifted: client-go's default of 5
// requests a second would make a test's setup, not the server, the
// bottleneck.
func (c *Cluster) RESTConfig() *rest.Config {
	return &rest.Config{
		Host:            c.URL,
		BearerToken:     c.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.CACert},
		QPS:             1000,
		Burst:           2000,
	}
}
