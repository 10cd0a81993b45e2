package api

import (
	"context"
	"errors"
	"strings"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/actions"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/oci"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/workflow"
)

// imageSources resolves how the agent pulls the images an action names
// (actions.NamedImages: its own, and waitdaemon's IMAGE):
// the server's registry settings with the Hardware's annotation on top
// (oci.Settings.Merge decides which wins), each image given only its own
// registry's credentials. A failure to resolve (an invalid reference, an
// annotation that does not parse) is carried in the source's error, for
// the agent to fail the action with if it runs the image: a native action
// of that image needs none of it.
func (s *Services) imageSources(ctx context.Context, na *workflow.NextAction, agent workflow.AgentName) []*v1.ImageSource {
	settings, hwErr := s.registrySettings(ctx, na.WorkflowID, agent)
	var out []*v1.ImageSource
	for _, image := range actions.NamedImages(na.Image, na.Environment) {
		src := &v1.ImageSource{Image: image}
		out = append(out, src)
		if hwErr != nil {
			src.Error = hwErr.Error()
			continue
		}
		r, err := settings.Resolve(image)
		if err != nil {
			src.Error = err.Error()
			continue
		}
		src.Ref, src.Mirror, src.PlainHttp, src.CaPem = r.Ref, r.Mirror, r.PlainHTTP, r.CA
		if r.AuthKind() != "" {
			src.Credentials = &v1.RegistryCredentials{Username: r.Auth.Username, Password: r.Auth.Password,
				IdentityToken: r.Auth.IdentityToken, RegistryToken: r.Auth.RegistryToken}
		}
	}
	return out
}

// registrySettings are the server's registry settings with those of the
// Hardware the agent runs the workflow on.
func (s *Services) registrySettings(ctx context.Context, workflowID string, agent workflow.AgentName) (oci.Settings, error) {
	ns, name, _ := strings.Cut(workflowID, "/")
	obj, err := store.GetShared(ctx, s.cfg.Store, model.KindWorkflow, ns, name) // read only
	if errors.Is(err, store.ErrNotFound) {
		return s.cfg.Registries, nil
	}
	if err != nil {
		return oci.Settings{}, err
	}
	hws, err := s.agentHardware(ctx, obj.(*model.Workflow), agent)
	if err != nil {
		return oci.Settings{}, err
	}
	settings := s.cfg.Registries
	for _, hw := range hws {
		h, err := hw.Registries()
		if err != nil {
			s.log.Warn("registry settings of a hardware do not parse; its container actions fail", "hardware", hw.Key(), "err", err)
			return oci.Settings{}, err
		}
		settings = settings.Merge(h)
	}
	return settings, nil
}
