package server

import (
	"fmt"
	"os"

	"github.com/anvilproj/anvil/internal/leader"
	"github.com/anvilproj/anvil/internal/peers"
)

// replicaRegistry returns Kubernetes mode's replica registry, under the
// leader election's identity and in its namespace, or nil with the
// embedded store (one server: no peers). It publishes PeerURL, else the
// plain HTTP port at the public address (every replica serves the API
// there); with neither, this replica asks its peers but is not asked. As
// the agent URL it publishes the boot scripts' anvil.server= (publicHTTP),
// which the other replicas' boot scripts list after their own.
func replicaRegistry(cfg Config, el *leader.Elector) (*peers.Registry, error) {
	if el == nil {
		return nil, nil
	}
	rc, err := cfg.Store.RESTConfig()
	if err != nil {
		return nil, err
	}
	u, agentURL := cfg.PeerURL, ""
	if public, err := resolvePublicIP(cfg.PublicIP, cfg.Bind); err == nil {
		agentURL = publicHTTP(cfg, public)
		if u == "" && !cfg.DisableHTTP {
			u = agentURL
		}
	}
	// In a pod the Lease is the pod's, deleted with it.
	pod := peers.Pod{Name: os.Getenv("POD_NAME"), UID: os.Getenv("POD_UID")}
	reg, err := peers.New(peers.Config{REST: rc, Namespace: leaseNamespace(cfg), Identity: el.Identity(), URL: u, AgentURL: agentURL,
		Pod: pod, Log: cfg.Logger})
	if err != nil && cfg.PeerURL != "" {
		return nil, fmt.Errorf("--peer-url: %w", err)
	}
	return reg, err
}
