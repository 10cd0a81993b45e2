package server

import (
	"net"
	"strconv"

	"github.com/anvilproj/anvil/internal/leader"
	"github.com/anvilproj/anvil/internal/peers"
)

// replicaRegistry returns Kubernetes mode's replica registry, under the
// leader election's identity and in its namespace, or nil with the
// embedded store (one server: no peers). It publishes PeerURL, else the
// plain HTTP port at the public address (every replica serves the API
// there); with neither, this replica asks its peers but is not asked.
func replicaRegistry(cfg Config, el *leader.Elector) (*peers.Registry, error) {
	if el == nil {
		return nil, nil
	}
	rc, err := cfg.Store.RESTConfig()
	if err != nil {
		return nil, err
	}
	u := cfg.PeerURL
	if u == "" && !cfg.DisableHTTP {
		if public, err := resolvePublicIP(cfg.PublicIP, cfg.Bind); err == nil {
			u = "http://" + net.JoinHostPort(public.String(), strconv.Itoa(cfg.HTTPPort))
		}
	}
	return peers.New(peers.Config{REST: rc, Namespace: leaseNamespace(cfg), Identity: el.Identity(), URL: u, Log: cfg.Logger})
}
