// Command anvil-test-idp is a real OpenID Provider for Anvil's OIDC login
// tests: zitadel/oidc's example OP (its op package, in-memory storage and
// login form, unchanged), with two things of Anvil's own around it —
// users read from a JSON file, and the scope "anvil", which puts a user's
// organisation and roles into the ID token as the claims org_id and roles
// (what `anvil serve --auth-org-claim/--auth-roles-claim` read by
// default). Everything that matters to the test — discovery, the
// authorization endpoint, the login form, PKCE, the token endpoint, ID
// token signing and the JWKS — is the library's.
//
//	anvil-test-idp -users users.json -client anvil -secret S -redirect-uri https://127.0.0.1:7443/ui/oidc/callback
//
// It listens on 127.0.0.1 (a free port unless -port), prints
// "issuer http://localhost:PORT/" on standard output once it serves, and
// runs until killed. It is built by scripts/fetch-oidc.sh (make oidc)
// into .cache/oidc/bin; it is a module of its own so that the main module
// never depends on it.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// anvilScope asks for the user's org_id and roles claims in the ID token.
const anvilScope = "anvil"

// user is one entry of the users file, keyed by username.
type user struct {
	Password string   `json:"password"`
	Org      string   `json:"org"`
	Roles    []string `json:"roles"`
}

// users is the storage.UserStore of the users file: the username is the
// user's ID (the ID token's sub).
type users map[string]user

func (u users) GetUserByID(id string) *storage.User { return u.GetUserByUsername(id) }

func (u users) GetUserByUsername(name string) *storage.User {
	e, ok := u[name]
	if !ok {
		return nil
	}
	return &storage.User{ID: name, Username: name, Password: e.Password, FirstName: name, EmailVerified: true}
}

func (u users) ExampleClientID() string { return "service" }

// anvilStorage is the example storage with the anvil scope's claims.
type anvilStorage struct {
	*storage.Storage
	users users
}

// GetClientByClientID lets every client ask for the anvil scope.
func (s anvilStorage) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	c, err := s.Storage.GetClientByClientID(ctx, id)
	if err != nil {
		return nil, err
	}
	return anvilClient{c}, nil
}

type anvilClient struct{ op.Client }

func (c anvilClient) IsScopeAllowed(scope string) bool {
	return scope == anvilScope || c.Client.IsScopeAllowed(scope)
}

// SetUserinfoFromRequest adds org_id and roles to the ID token of a
// request that asked for the anvil scope.
func (s anvilStorage) SetUserinfoFromRequest(ctx context.Context, info *oidc.UserInfo, req op.IDTokenRequest, scopes []string) error {
	if err := s.Storage.SetUserinfoFromRequest(ctx, info, req, scopes); err != nil {
		return err
	}
	if u, ok := s.users[req.GetSubject()]; ok && slices.Contains(scopes, anvilScope) {
		info.AppendClaims("org_id", u.Org)
		info.AppendClaims("roles", u.Roles)
	}
	return nil
}

func main() {
	usersFile := flag.String("users", "", "JSON file of users: {\"NAME\": {\"password\": …, \"org\": …, \"roles\": […]}}")
	client := flag.String("client", "anvil", "client ID of the registered web client")
	secret := flag.String("secret", "", "its client secret")
	redirect := flag.String("redirect-uri", "", "its redirect URI")
	port := flag.Int("port", 0, "port on 127.0.0.1 (0: a free one)")
	flag.Parse()
	if *usersFile == "" || *secret == "" || *redirect == "" {
		log.Fatal("anvil-test-idp: -users, -secret and -redirect-uri are required")
	}
	b, err := os.ReadFile(*usersFile)
	if err != nil {
		log.Fatal(err)
	}
	var us users
	if err := json.Unmarshal(b, &us); err != nil {
		log.Fatalf("anvil-test-idp: %s: %v", *usersFile, err)
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", *port))
	if err != nil {
		log.Fatal(err)
	}
	issuer := fmt.Sprintf("http://localhost:%d/", ln.Addr().(*net.TCPAddr).Port)
	storage.RegisterClients(storage.WebClient(*client, *secret, *redirect))
	st := anvilStorage{Storage: storage.NewStorage(us), users: us}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	router := exampleop.SetupServer(issuer, st, logger, false)
	fmt.Printf("issuer %s\n", issuer)
	log.Fatal(http.Serve(ln, router))
}
