package openshell

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testNow is the fixed clock of the resolver tests.
var testNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// writeTree creates files (path relative to root -> content) under root.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// md is a metadata.json.
func md(endpoint, authMode string) string {
	m := map[string]any{"name": "ignored", "gateway_endpoint": endpoint, "is_remote": true, "gateway_port": 1, "future_field": []int{1}}
	if authMode != "" {
		m["auth_mode"] = authMode
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// mtlsFiles returns the three mtls files of a user gateway directory.
func mtlsFiles(dirName string) map[string]string {
	d := "user/gateways/" + dirName + "/mtls/"
	return map[string]string{d + "ca.crt": "ca", d + "tls.crt": "crt", d + "tls.key": "key"}
}

func token(access string, expiresAt *time.Time) string {
	m := map[string]any{"access_token": access, "refresh_token": "refresh-secret", "issuer": "https://idp", "client_id": "openshell"}
	if expiresAt != nil {
		m["expires_at"] = expiresAt.Unix()
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func at(d time.Duration) *time.Time { t := testNow.Add(d); return &t }

func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func TestResolve(t *testing.T) {
	// In want, file paths are relative to the test root ("user/..."); the
	// user dir is root/user and the system dir root/sys.
	tests := []struct {
		name    string
		flag    string
		env     map[string]string
		files   map[string]string
		want    Settings
		wantErr error  // sentinel, when an error is expected
		errHas  string // substring of the error, "$ROOT/" expanded
	}{
		// Precedence.
		{
			name:  "flag beats env endpoint, env name and active gateway",
			flag:  "https://flag.example:443",
			env:   map[string]string{EnvEndpoint: "http://env:1", EnvGateway: "dev"},
			files: merge(map[string]string{"user/active_gateway": "dev", "user/gateways/dev/metadata.json": md("https://dev:1", "")}, mtlsFiles("dev")),
			want:  Settings{Endpoint: "https://flag.example:443", Name: "dev", CACertFile: "user/gateways/dev/mtls/ca.crt", ClientCertFile: "user/gateways/dev/mtls/tls.crt", ClientKeyFile: "user/gateways/dev/mtls/tls.key"},
		},
		{
			name:  "flag without a matching gateway has no name; mtls dir is the host",
			flag:  "https://flag.example:443",
			env:   map[string]string{EnvEndpoint: "http://env:1"},
			files: merge(map[string]string{"user/active_gateway": "dev", "user/gateways/dev/metadata.json": md("https://dev:1", "")}, mtlsFiles("flag.example")),
			want:  Settings{Endpoint: "https://flag.example:443", CACertFile: "user/gateways/flag.example/mtls/ca.crt", ClientCertFile: "user/gateways/flag.example/mtls/tls.crt", ClientKeyFile: "user/gateways/flag.example/mtls/tls.key"},
		},
		{
			name:  "env endpoint beats active gateway",
			env:   map[string]string{EnvEndpoint: " http://10.0.0.5:8080/ "},
			files: map[string]string{"user/active_gateway": "dev", "user/gateways/dev/metadata.json": md("https://dev:1", "")},
			want:  Settings{Endpoint: "http://10.0.0.5:8080"},
		},
		{
			name: "env endpoint named by OPENSHELL_GATEWAY without metadata",
			env:  map[string]string{EnvEndpoint: "http://x:1", EnvGateway: "nowhere"},
			want: Settings{Endpoint: "http://x:1", Name: "nowhere"},
		},
		{
			name:  "explicit endpoint named by matching stored endpoint, trailing slash ignored",
			flag:  "https://gw.example:8443",
			files: merge(map[string]string{"user/gateways/gw/metadata.json": md("https://gw.example:8443/", "mtls")}, mtlsFiles("gw")),
			want:  Settings{Endpoint: "https://gw.example:8443", Name: "gw", CACertFile: "user/gateways/gw/mtls/ca.crt", ClientCertFile: "user/gateways/gw/mtls/tls.crt", ClientKeyFile: "user/gateways/gw/mtls/tls.key"},
		},
		{
			name:  "explicit endpoint with trailing slash matches stored endpoint without",
			flag:  "http://gw.example:80/",
			files: map[string]string{"user/gateways/gw/metadata.json": md("http://gw.example:80", "plaintext")},
			want:  Settings{Endpoint: "http://gw.example:80", Name: "gw"},
		},
		{
			name: "explicit endpoint matching two gateways: the active one wins",
			flag: "http://shared:1",
			files: map[string]string{
				"user/active_gateway":           "b",
				"user/gateways/a/metadata.json": md("http://shared:1", ""),
				"user/gateways/b/metadata.json": md("http://shared:1", ""),
			},
			want: Settings{Endpoint: "http://shared:1", Name: "b"},
		},
		{
			name: "explicit endpoint matching two gateways, none active: name order",
			flag: "http://shared:1",
			files: map[string]string{
				"user/gateways/b/metadata.json": md("http://shared:1", ""),
				"user/gateways/a/metadata.json": md("http://shared:1", ""),
			},
			want: Settings{Endpoint: "http://shared:1", Name: "a"},
		},
		{
			name:  "explicit endpoint matching a system gateway",
			flag:  "http://site:1",
			files: map[string]string{"sys/gateways/site/metadata.json": md("http://site:1", "")},
			want:  Settings{Endpoint: "http://site:1", Name: "site"},
		},
		{
			name:  "explicit endpoint: malformed stored metadata is skipped",
			flag:  "http://site:1",
			files: map[string]string{"user/gateways/a/metadata.json": "{", "user/gateways/b/metadata.json": md("http://site:1", "")},
			want:  Settings{Endpoint: "http://site:1", Name: "b"},
		},
		{
			name:  "OPENSHELL_GATEWAY beats the active gateway",
			env:   map[string]string{EnvGateway: "dev"},
			files: map[string]string{"user/active_gateway": "other", "user/gateways/dev/metadata.json": md("http://dev:1", ""), "user/gateways/other/metadata.json": md("http://other:1", "")},
			want:  Settings{Endpoint: "http://dev:1", Name: "dev"},
		},
		{
			name:  "blank OPENSHELL_GATEWAY is ignored",
			env:   map[string]string{EnvGateway: "  "},
			files: map[string]string{"user/active_gateway": "other", "user/gateways/other/metadata.json": md("http://other:1", "")},
			want:  Settings{Endpoint: "http://other:1", Name: "other"},
		},
		{
			name:  "active gateway, trimmed",
			files: map[string]string{"user/active_gateway": "  dev\n", "user/gateways/dev/metadata.json": md("http://dev", "")},
			want:  Settings{Endpoint: "http://dev:17670", Name: "dev"},
		},
		{
			name:  "system active gateway when the user has none",
			files: map[string]string{"sys/active_gateway": "site", "sys/gateways/site/metadata.json": md("http://site:1", "")},
			want:  Settings{Endpoint: "http://site:1", Name: "site"},
		},
		{
			name:  "user active gateway beats the system's",
			files: map[string]string{"user/active_gateway": "mine", "sys/active_gateway": "site", "sys/gateways/site/metadata.json": md("http://site:1", ""), "sys/gateways/mine/metadata.json": md("http://mine:1", "")},
			want:  Settings{Endpoint: "http://mine:1", Name: "mine"},
		},
		{
			name:  "empty user active file falls back to the system's",
			files: map[string]string{"user/active_gateway": "\n", "sys/active_gateway": "site", "sys/gateways/site/metadata.json": md("http://site:1", "")},
			want:  Settings{Endpoint: "http://site:1", Name: "site"},
		},
		{
			name:  "user active file with a path falls back to the system's",
			files: map[string]string{"user/active_gateway": "../../etc", "sys/active_gateway": "site", "sys/gateways/site/metadata.json": md("http://site:1", "")},
			want:  Settings{Endpoint: "http://site:1", Name: "site"},
		},
		{
			name:    "nothing selects a gateway",
			files:   map[string]string{"user/gateways/dev/metadata.json": md("http://dev:1", "")},
			wantErr: ErrNoGateway,
			errHas:  "--gateway",
		},
		{
			name:    "active file naming a parent directory only",
			files:   map[string]string{"user/active_gateway": ".."},
			wantErr: ErrNoGateway,
		},
		{
			name:    "unknown OPENSHELL_GATEWAY",
			env:     map[string]string{EnvGateway: "ghost"},
			wantErr: ErrUnknownGateway,
			errHas:  `"ghost": no $ROOT/user/gateways/ghost/metadata.json or $ROOT/sys/gateways/ghost/metadata.json`,
		},
		{
			name:    "unknown active gateway",
			files:   map[string]string{"user/active_gateway": "ghost"},
			wantErr: ErrUnknownGateway,
			errHas:  `"ghost"`,
		},
		{
			name:    "OPENSHELL_GATEWAY with a path",
			env:     map[string]string{EnvGateway: "../x"},
			files:   map[string]string{"x/metadata.json": md("http://x:1", "")},
			wantErr: ErrUnknownGateway,
			errHas:  `"../x"`,
		},
		{
			name:    "OPENSHELL_GATEWAY with a path next to an explicit endpoint",
			env:     map[string]string{EnvGateway: "a/b", EnvEndpoint: "http://x:1"},
			wantErr: ErrUnknownGateway,
		},

		// Metadata: shadowing and contents.
		{
			name:  "user metadata shadows the system's",
			env:   map[string]string{EnvGateway: "dev"},
			files: map[string]string{"user/gateways/dev/metadata.json": md("http://user:1", ""), "sys/gateways/dev/metadata.json": md("http://sys:1", "")},
			want:  Settings{Endpoint: "http://user:1", Name: "dev"},
		},
		{
			name:   "malformed user metadata does not fall back to the system's",
			env:    map[string]string{EnvGateway: "dev"},
			files:  map[string]string{"user/gateways/dev/metadata.json": "{", "sys/gateways/dev/metadata.json": md("http://sys:1", "")},
			errHas: "$ROOT/user/gateways/dev/metadata.json",
		},
		{
			name:  "system metadata, certificates from the user dir",
			env:   map[string]string{EnvGateway: "site"},
			files: merge(map[string]string{"sys/gateways/site/metadata.json": md("https://site:1", "mtls")}, mtlsFiles("site")),
			want:  Settings{Endpoint: "https://site:1", Name: "site", CACertFile: "user/gateways/site/mtls/ca.crt", ClientCertFile: "user/gateways/site/mtls/tls.crt", ClientKeyFile: "user/gateways/site/mtls/tls.key"},
		},
		{
			name: "no /etc fallback for certificates",
			env:  map[string]string{EnvGateway: "site"},
			files: map[string]string{
				"sys/gateways/site/metadata.json": md("https://site:1", "mtls"),
				"sys/gateways/site/mtls/ca.crt":   "ca", "sys/gateways/site/mtls/tls.crt": "crt", "sys/gateways/site/mtls/tls.key": "key",
			},
			wantErr: ErrNoCredentials,
			errHas:  "$ROOT/user/gateways/site/mtls/ca.crt",
		},
		{
			name:    "metadata without gateway_endpoint",
			env:     map[string]string{EnvGateway: "dev"},
			files:   map[string]string{"user/gateways/dev/metadata.json": `{"name":"dev"}`},
			wantErr: ErrBadEndpoint,
			errHas:  "$ROOT/user/gateways/dev/metadata.json",
		},
		{
			name:    "bad endpoint in metadata names the file",
			env:     map[string]string{EnvGateway: "dev"},
			files:   map[string]string{"user/gateways/dev/metadata.json": md("dev:8080", "")},
			wantErr: ErrBadEndpoint,
			errHas:  "$ROOT/user/gateways/dev/metadata.json",
		},

		// Sanitized mtls directories.
		{
			name:  "mtls dir of a name with odd characters",
			env:   map[string]string{EnvGateway: "my gw@corp"},
			files: merge(map[string]string{"user/gateways/my gw@corp/metadata.json": md("https://gw:1", "")}, mtlsFiles("my_gw_corp")),
			want:  Settings{Endpoint: "https://gw:1", Name: "my gw@corp", CACertFile: "user/gateways/my_gw_corp/mtls/ca.crt", ClientCertFile: "user/gateways/my_gw_corp/mtls/tls.crt", ClientKeyFile: "user/gateways/my_gw_corp/mtls/tls.key"},
		},
		{
			name:  "unnamed 127.0.0.1 uses the openshell mtls dir",
			flag:  "https://127.0.0.1:9000",
			files: mtlsFiles("openshell"),
			want:  Settings{Endpoint: "https://127.0.0.1:9000", CACertFile: "user/gateways/openshell/mtls/ca.crt", ClientCertFile: "user/gateways/openshell/mtls/tls.crt", ClientKeyFile: "user/gateways/openshell/mtls/tls.key"},
		},
		{
			name:  "unnamed localhost uses the openshell mtls dir",
			flag:  "https://LocalHost",
			files: mtlsFiles("openshell"),
			want:  Settings{Endpoint: "https://LocalHost:17670", CACertFile: "user/gateways/openshell/mtls/ca.crt", ClientCertFile: "user/gateways/openshell/mtls/tls.crt", ClientKeyFile: "user/gateways/openshell/mtls/tls.key"},
		},
		{
			name:  "unnamed IPv6 host is sanitized",
			flag:  "https://[fd00::1]:9000",
			files: mtlsFiles("fd00__1"),
			want:  Settings{Endpoint: "https://[fd00::1]:9000", CACertFile: "user/gateways/fd00__1/mtls/ca.crt", ClientCertFile: "user/gateways/fd00__1/mtls/tls.crt", ClientKeyFile: "user/gateways/fd00__1/mtls/tls.key"},
		},

		// mTLS files.
		{
			name:    "https without token: missing tls.key",
			env:     map[string]string{EnvGateway: "dev"},
			files:   map[string]string{"user/gateways/dev/metadata.json": md("https://dev:1", ""), "user/gateways/dev/mtls/ca.crt": "ca", "user/gateways/dev/mtls/tls.crt": "crt"},
			wantErr: ErrNoCredentials,
			errHas:  "$ROOT/user/gateways/dev/mtls/tls.key does not exist",
		},
		{
			name:    "https without token: missing ca.crt",
			env:     map[string]string{EnvGateway: "dev"},
			files:   map[string]string{"user/gateways/dev/metadata.json": md("https://dev:1", "mtls"), "user/gateways/dev/mtls/tls.key": "key", "user/gateways/dev/mtls/tls.crt": "crt"},
			wantErr: ErrNoCredentials,
			errHas:  "$ROOT/user/gateways/dev/mtls/ca.crt does not exist",
		},
		{
			name:    "unnamed https endpoint without certificates",
			flag:    "https://gw.example",
			wantErr: ErrNoCredentials,
			errHas:  "$ROOT/user/gateways/gw.example/mtls/ca.crt",
		},
		{
			name:  "http needs no certificates",
			env:   map[string]string{EnvGateway: "dev"},
			files: map[string]string{"user/gateways/dev/metadata.json": md("http://dev:1", "mtls")},
			want:  Settings{Endpoint: "http://dev:1", Name: "dev"},
		},
		{
			name:  "insecure https uses no mtls files",
			env:   map[string]string{EnvGateway: "dev", EnvInsecure: "1"},
			files: merge(map[string]string{"user/gateways/dev/metadata.json": md("https://dev:1", "")}, mtlsFiles("dev")),
			want:  Settings{Endpoint: "https://dev:1", Name: "dev", Insecure: true},
		},
		{
			name: "insecure https needs no mtls files",
			flag: "https://gw.example:1",
			env:  map[string]string{EnvInsecure: "true"},
			want: Settings{Endpoint: "https://gw.example:1", Insecure: true},
		},
		{
			name:    "insecure false still verifies",
			flag:    "https://gw.example:1",
			env:     map[string]string{EnvInsecure: "false"},
			wantErr: ErrNoCredentials,
		},
		{
			name: "insecure on http is recorded and harmless",
			flag: "http://gw.example:1",
			env:  map[string]string{EnvInsecure: "yes"},
			want: Settings{Endpoint: "http://gw.example:1", Insecure: true},
		},

		// OIDC and other auth modes.
		{
			name:  "oidc token, valid, no mtls files: system roots",
			env:   map[string]string{EnvGateway: "cloud"},
			files: map[string]string{"user/gateways/cloud/metadata.json": md("https://cloud.example", "oidc"), "user/gateways/cloud/oidc_token.json": token("access-secret", at(time.Hour))},
			want:  Settings{Endpoint: "https://cloud.example:17670", Name: "cloud", BearerToken: "access-secret"},
		},
		{
			name:  "oidc token without expiry is valid",
			env:   map[string]string{EnvGateway: "cloud"},
			files: map[string]string{"user/gateways/cloud/metadata.json": md("https://cloud.example:443", "oidc"), "user/gateways/cloud/oidc_token.json": token("access-secret", nil)},
			want:  Settings{Endpoint: "https://cloud.example:443", Name: "cloud", BearerToken: "access-secret"},
		},
		{
			name: "oidc token with the mtls files present uses them",
			env:  map[string]string{EnvGateway: "cloud"},
			files: merge(map[string]string{"user/gateways/cloud/metadata.json": md("https://cloud.example:443", "oidc"), "user/gateways/cloud/oidc_token.json": token("access-secret", at(31*time.Second))},
				mtlsFiles("cloud")),
			want: Settings{Endpoint: "https://cloud.example:443", Name: "cloud", BearerToken: "access-secret", CACertFile: "user/gateways/cloud/mtls/ca.crt", ClientCertFile: "user/gateways/cloud/mtls/tls.crt", ClientKeyFile: "user/gateways/cloud/mtls/tls.key"},
		},
		{
			name:  "oidc token with only ca.crt",
			env:   map[string]string{EnvGateway: "cloud"},
			files: map[string]string{"user/gateways/cloud/metadata.json": md("https://cloud.example:443", "oidc"), "user/gateways/cloud/oidc_token.json": token("access-secret", nil), "user/gateways/cloud/mtls/ca.crt": "ca"},
			want:  Settings{Endpoint: "https://cloud.example:443", Name: "cloud", BearerToken: "access-secret", CACertFile: "user/gateways/cloud/mtls/ca.crt"},
		},
		{
			name:    "oidc token with tls.crt but no tls.key",
			env:     map[string]string{EnvGateway: "cloud"},
			files:   map[string]string{"user/gateways/cloud/metadata.json": md("https://cloud.example:443", "oidc"), "user/gateways/cloud/oidc_token.json": token("access-secret", nil), "user/gateways/cloud/mtls/tls.crt": "crt"},
			wantErr: ErrNoCredentials,
			errHas:  "$ROOT/user/gateways/cloud/mtls/tls.key",
		},
		{
			name:  "oidc over http still carries the token",
			env:   map[string]string{EnvGateway: "cloud"},
			files: map[string]string{"user/gateways/cloud/metadata.json": md("http://cloud:1", "oidc"), "user/gateways/cloud/oidc_token.json": token("access-secret", nil)},
			want:  Settings{Endpoint: "http://cloud:1", Name: "cloud", BearerToken: "access-secret"},
		},
		{
			name:    "oidc token expired",
			env:     map[string]string{EnvGateway: "cloud"},
			files:   map[string]string{"user/gateways/cloud/metadata.json": md("https://cloud.example", "oidc"), "user/gateways/cloud/oidc_token.json": token("access-secret", at(-time.Hour))},
			wantErr: ErrLoginRequired,
			errHas:  "log in again with the openshell CLI",
		},
		{
			name:    "oidc token within 30s of expiry counts as expired",
			env:     map[string]string{EnvGateway: "cloud"},
			files:   map[string]string{"user/gateways/cloud/metadata.json": md("https://cloud.example", "oidc"), "user/gateways/cloud/oidc_token.json": token("access-secret", at(30*time.Second))},
			wantErr: ErrLoginRequired,
			errHas:  "expired",
		},
		{
			name:    "oidc without token file",
			env:     map[string]string{EnvGateway: "cloud"},
			files:   map[string]string{"user/gateways/cloud/metadata.json": md("https://cloud.example", "oidc")},
			wantErr: ErrLoginRequired,
			errHas:  "$ROOT/user/gateways/cloud/oidc_token.json",
		},
		{
			name:    "oidc token without access_token",
			env:     map[string]string{EnvGateway: "cloud"},
			files:   map[string]string{"user/gateways/cloud/metadata.json": md("https://cloud.example", "oidc"), "user/gateways/cloud/oidc_token.json": `{"refresh_token":"r"}`},
			wantErr: ErrLoginRequired,
		},
		{
			name:  "explicit endpoint named by OPENSHELL_GATEWAY takes that gateway's token",
			flag:  "http://tunnel:1",
			env:   map[string]string{EnvGateway: "cloud"},
			files: map[string]string{"user/gateways/cloud/metadata.json": md("https://cloud.example", "oidc"), "user/gateways/cloud/oidc_token.json": token("access-secret", nil)},
			want:  Settings{Endpoint: "http://tunnel:1", Name: "cloud", BearerToken: "access-secret"},
		},
		{
			name:  "mtls auth mode ignores a stray token file",
			env:   map[string]string{EnvGateway: "dev"},
			files: map[string]string{"user/gateways/dev/metadata.json": md("http://dev:1", "mtls"), "user/gateways/dev/oidc_token.json": token("access-secret", nil)},
			want:  Settings{Endpoint: "http://dev:1", Name: "dev"},
		},
		{
			name:    "cloudflare_jwt is not supported",
			env:     map[string]string{EnvGateway: "cf"},
			files:   map[string]string{"user/gateways/cf/metadata.json": md("https://cf.example", "cloudflare_jwt")},
			wantErr: ErrUnsupportedAuth,
			errHas:  `"cloudflare_jwt"`,
		},
		{
			name:    "unknown auth mode",
			env:     map[string]string{EnvGateway: "k"},
			files:   map[string]string{"user/gateways/k/metadata.json": md("http://k:1", "kerberos")},
			wantErr: ErrUnsupportedAuth,
			errHas:  `"kerberos"`,
		},

		// Workspace.
		{
			name: "workspace from the environment",
			flag: "http://gw:1",
			env:  map[string]string{EnvWorkspace: " team "},
			want: Settings{Endpoint: "http://gw:1", Workspace: "team"},
		},

		// Endpoint URLs.
		{name: "default port", flag: "http://gw", want: Settings{Endpoint: "http://gw:17670"}},
		{name: "default port IPv6", flag: "http://[::1]", want: Settings{Endpoint: "http://[::1]:17670"}},
		{name: "upper-case scheme", flag: "HTTP://gw:2", want: Settings{Endpoint: "http://gw:2"}},
		{name: "empty port", flag: "http://gw:", want: Settings{Endpoint: "http://gw:17670"}},
		{name: "no scheme", flag: "gw.example:17670", wantErr: ErrBadEndpoint, errHas: "no scheme"},
		{name: "no scheme, bare host", env: map[string]string{EnvEndpoint: "gw.example"}, wantErr: ErrBadEndpoint, errHas: EnvEndpoint},
		{name: "ftp scheme", flag: "ftp://gw.example", wantErr: ErrBadEndpoint, errHas: `"ftp"`},
		{name: "grpc scheme", flag: "grpc://gw.example", wantErr: ErrBadEndpoint},
		{name: "empty host", flag: "https://", wantErr: ErrBadEndpoint, errHas: "empty host"},
		{name: "empty host with port", flag: "http://:17670", wantErr: ErrBadEndpoint, errHas: "empty host"},
		{name: "port zero", flag: "http://gw:0", wantErr: ErrBadEndpoint},
		{name: "port too large", flag: "http://gw:70000", wantErr: ErrBadEndpoint},
		{name: "port not a number", flag: "http://gw:http", wantErr: ErrBadEndpoint},
		{name: "path", flag: "http://gw:1/api", wantErr: ErrBadEndpoint},
		{name: "query", flag: "http://gw:1?x=1", wantErr: ErrBadEndpoint},
		{name: "user info", flag: "http://user:secret@gw:1", wantErr: ErrBadEndpoint, errHas: "xxxxx"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			writeTree(t, root, tt.files)
			env := map[string]string{"HOME": "/nonexistent-home", "XDG_CONFIG_HOME": "/nonexistent-xdg"}
			for k, v := range tt.env {
				env[k] = v
			}
			got, err := Resolve(Sources{
				Endpoint:  tt.flag,
				Getenv:    func(k string) string { return env[k] },
				ConfigDir: filepath.Join(root, "user"),
				SystemDir: filepath.Join(root, "sys"),
				Now:       func() time.Time { return testNow },
			})
			if tt.wantErr != nil || tt.errHas != "" {
				if err == nil {
					t.Fatalf("Resolve = %+v, want an error", got)
				}
				t.Log(err)
				if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
					t.Errorf("error %q is not %v", err, tt.wantErr)
				}
				if want := strings.ReplaceAll(tt.errHas, "$ROOT/", root+"/"); !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
				if strings.Contains(err.Error(), "secret") {
					t.Errorf("error %q leaks a token", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := tt.want
			if want.Workspace == "" {
				want.Workspace = DefaultWorkspace
			}
			for _, p := range []*string{&want.CACertFile, &want.ClientCertFile, &want.ClientKeyFile} {
				if *p != "" {
					*p = filepath.Join(root, filepath.FromSlash(*p))
				}
			}
			if got != want {
				t.Errorf("Resolve =\n  %#v\nwant\n  %#v", plain(got), plain(want))
			}
		})
	}
}

// plain prints every field, the token included, for test failures only.
type plain Settings

func TestResolveDirs(t *testing.T) {
	tests := []struct {
		name         string
		src          Sources
		env          map[string]string
		user, system string
	}{
		{"XDG_CONFIG_HOME", Sources{}, map[string]string{"XDG_CONFIG_HOME": "/x", "HOME": "/h"}, "/x/openshell", "/etc/openshell"},
		{"HOME", Sources{}, map[string]string{"HOME": "/h"}, "/h/.config/openshell", "/etc/openshell"},
		{"neither", Sources{}, nil, "", "/etc/openshell"},
		{"explicit dirs", Sources{ConfigDir: "/c", SystemDir: "/s"}, map[string]string{"HOME": "/h", EnvSystemDir: "/sysenv"}, "/c", "/s"},
		{"absolute system dir from env", Sources{}, map[string]string{EnvSystemDir: "/sysenv"}, "", "/sysenv"},
		{"relative system dir from env ignored", Sources{}, map[string]string{EnvSystemDir: "rel/dir"}, "", "/etc/openshell"},
		{"empty system dir from env ignored", Sources{}, map[string]string{EnvSystemDir: ""}, "", "/etc/openshell"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := tt.src
			src.Getenv = func(k string) string { return tt.env[k] }
			r := newResolver(src)
			if r.userDir != tt.user || r.systemDir != tt.system {
				t.Errorf("dirs %q, %q; want %q, %q", r.userDir, r.systemDir, tt.user, tt.system)
			}
		})
	}
}

// TestResolveFromEnvironmentDirs resolves through XDG_CONFIG_HOME and
// OPENSHELL_SYSTEM_GATEWAY_DIR rather than explicit directories.
func TestResolveFromEnvironmentDirs(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"xdg/openshell/active_gateway":             "site",
		"sysenv/gateways/site/metadata.json":       md("https://site:1", ""),
		"xdg/openshell/gateways/site/mtls/ca.crt":  "ca",
		"xdg/openshell/gateways/site/mtls/tls.crt": "crt",
		"xdg/openshell/gateways/site/mtls/tls.key": "key",
	})
	env := map[string]string{"XDG_CONFIG_HOME": filepath.Join(root, "xdg"), EnvSystemDir: filepath.Join(root, "sysenv")}
	got, err := Resolve(Sources{Getenv: func(k string) string { return env[k] }})
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "site" || got.Endpoint != "https://site:1" || got.CACertFile != filepath.Join(root, "xdg/openshell/gateways/site/mtls/ca.crt") {
		t.Errorf("Resolve = %#v", plain(got))
	}

	// Without any config directory an http endpoint still resolves, and an
	// https one explains what is missing.
	none := func(string) string { return "" }
	if got, err := Resolve(Sources{Endpoint: "http://gw:1", Getenv: none, SystemDir: root}); err != nil || got.Endpoint != "http://gw:1" {
		t.Errorf("http without config dir: %v, %v", got, err)
	}
	if _, err := Resolve(Sources{Endpoint: "https://gw:1", Getenv: none, SystemDir: root}); !errors.Is(err, ErrNoCredentials) || !strings.Contains(err.Error(), "HOME") {
		t.Errorf("https without config dir: %v, want ErrNoCredentials mentioning HOME", err)
	}
}

func TestParseInsecure(t *testing.T) {
	for v, want := range map[string]bool{
		"": false, "  ": false, "0": false, "false": false, "FALSE": false, " false\n": false,
		"1": true, "true": true, "yes": true, "no": true, "off": true, "00": true,
	} {
		if got := parseInsecure(v); got != want {
			t.Errorf("parseInsecure(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestSanitize(t *testing.T) {
	for in, want := range map[string]string{
		"dev":        "dev",
		"a.b-c_D9":   "a.b-c_D9",
		"my gw@corp": "my_gw_corp",
		"fd00::1":    "fd00__1",
		"é":          "_",
		"a/b\\c":     "a_b_c",
	} {
		if got := sanitize(in); got != want {
			t.Errorf("sanitize(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestTarget(t *testing.T) {
	for endpoint, want := range map[string]string{
		"https://gw.example:443": "gw.example:443",
		"http://gw":              "gw:17670",
		"https://[fd00::1]:9":    "[fd00::1]:9",
		"gw:1":                   "",
		"":                       "",
	} {
		if got := (Settings{Endpoint: endpoint}).Target(); got != want {
			t.Errorf("Target of %q = %q, want %q", endpoint, got, want)
		}
	}
}

// testPKI is a CA with a server certificate for 127.0.0.1 and localhost
// and a client certificate, written as an openshell mtls directory.
type testPKI struct {
	dir    string // mtls dir: ca.crt, tls.crt, tls.key
	server tls.Certificate
	pool   *x509.CertPool
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	now := time.Now()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	create := func(tmpl, parent *x509.Certificate, key *ecdsa.PrivateKey, signer *ecdsa.PrivateKey) (*x509.Certificate, []byte) {
		tmpl.SerialNumber = big.NewInt(now.UnixNano())
		tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(time.Hour)
		if parent == nil {
			parent = tmpl
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), signer)
		if err != nil {
			t.Fatal(err)
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return c, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	}
	keyPEM := func(k *ecdsa.PrivateKey) []byte {
		b, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: b})
	}
	caKey, srvKey, cliKey := newKey(), newKey(), newKey()
	ca, caPEM := create(&x509.Certificate{Subject: pkix.Name{CommonName: "test CA"}, IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}, nil, caKey, caKey)
	_, srvPEM := create(&x509.Certificate{Subject: pkix.Name{CommonName: "server"}, DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ca, srvKey, caKey)
	_, cliPEM := create(&x509.Certificate{Subject: pkix.Name{CommonName: "client"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, ca, cliKey, caKey)

	p := &testPKI{dir: filepath.Join(t.TempDir(), "mtls"), pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	writeTree(t, p.dir, map[string]string{"ca.crt": string(caPEM), "tls.crt": string(cliPEM), "tls.key": string(keyPEM(cliKey))})
	var err error
	if p.server, err = tls.X509KeyPair(srvPEM, keyPEM(srvKey)); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *testPKI) settings(endpoint string) Settings {
	return Settings{
		Endpoint:       endpoint,
		Workspace:      DefaultWorkspace,
		CACertFile:     filepath.Join(p.dir, "ca.crt"),
		ClientCertFile: filepath.Join(p.dir, "tls.crt"),
		ClientKeyFile:  filepath.Join(p.dir, "tls.key"),
	}
}

// serve accepts one mutual-TLS connection and reports its handshake.
func (p *testPKI) serve(t *testing.T) (addr string, result <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{p.server}, ClientCAs: p.pool, ClientAuth: tls.RequireAndVerifyClientCert, NextProtos: []string{"h2"}})
		if err := tc.Handshake(); err != nil {
			done <- err
			return
		}
		_, err = tc.Write([]byte{1})
		done <- err
	}()
	return ln.Addr().String(), done
}

func TestTLSConfigHandshake(t *testing.T) {
	p := newTestPKI(t)
	for _, host := range []string{"127.0.0.1", "localhost"} {
		t.Run(host, func(t *testing.T) {
			addr, result := p.serve(t)
			_, port, _ := net.SplitHostPort(addr)
			s := p.settings("https://" + net.JoinHostPort(host, port))
			cfg, err := s.TLSConfig()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.ServerName != host || cfg.MinVersion != tls.VersionTLS12 || cfg.InsecureSkipVerify || cfg.RootCAs == nil || len(cfg.Certificates) != 1 {
				t.Fatalf("TLSConfig: ServerName %q, MinVersion %x, InsecureSkipVerify %v, RootCAs %v, %d certificates",
					cfg.ServerName, cfg.MinVersion, cfg.InsecureSkipVerify, cfg.RootCAs != nil, len(cfg.Certificates))
			}
			c, err := tls.Dial("tcp", addr, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
				t.Fatalf("read after handshake: %v", err)
			}
			if err := <-result; err != nil {
				t.Fatalf("server: %v", err)
			}
		})
	}

	t.Run("server name not in certificate", func(t *testing.T) {
		addr, result := p.serve(t)
		cfg, err := p.settings("https://gw.invalid:1").TLSConfig()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tls.Dial("tcp", addr, cfg); err == nil {
			t.Fatal("handshake succeeded for a host the certificate does not name")
		}
		<-result
	})
}

func TestTLSConfig(t *testing.T) {
	p := newTestPKI(t)
	junk := filepath.Join(t.TempDir(), "junk.pem")
	writeTree(t, filepath.Dir(junk), map[string]string{"junk.pem": "not pem"})
	missing := filepath.Join(t.TempDir(), "missing.crt")

	if cfg, err := (Settings{Endpoint: "http://gw:1", Insecure: true, CACertFile: missing}).TLSConfig(); cfg != nil || err != nil {
		t.Errorf("http: TLSConfig = %v, %v; want nil, nil", cfg, err)
	}

	s := p.settings("https://gw:1")
	s.Insecure = true
	cfg, err := s.TLSConfig()
	if err != nil || !cfg.InsecureSkipVerify || len(cfg.Certificates) != 0 || cfg.RootCAs != nil {
		t.Errorf("insecure: TLSConfig = %+v, %v; want InsecureSkipVerify and no certificates", cfg, err)
	}

	cfg, err = (Settings{Endpoint: "https://[fd00::1]:1", BearerToken: "t"}).TLSConfig()
	if err != nil || cfg.ServerName != "fd00::1" || cfg.RootCAs != nil || len(cfg.Certificates) != 0 || cfg.InsecureSkipVerify {
		t.Errorf("token only: TLSConfig = %+v, %v; want system roots, no certificate, ServerName fd00::1", cfg, err)
	}

	other := newTestPKI(t)
	errCases := []struct {
		name  string
		edit  func(*Settings)
		names string
	}{
		{"missing CA", func(s *Settings) { s.CACertFile = missing }, missing},
		{"CA not PEM", func(s *Settings) { s.CACertFile = junk }, junk},
		{"missing certificate", func(s *Settings) { s.ClientCertFile = missing }, missing},
		{"missing key", func(s *Settings) { s.ClientKeyFile = missing }, missing},
		{"key of another certificate", func(s *Settings) { s.ClientKeyFile = filepath.Join(other.dir, "tls.key") }, filepath.Join(other.dir, "tls.key")},
		{"certificate without key", func(s *Settings) { s.ClientKeyFile = "" }, filepath.Join(p.dir, "tls.crt")},
		{"bad endpoint", func(s *Settings) { s.Endpoint = "gw:1" }, "gw:1"},
	}
	for _, tc := range errCases {
		t.Run(tc.name, func(t *testing.T) {
			s := p.settings("https://gw:1")
			tc.edit(&s)
			_, err := s.TLSConfig()
			if err == nil || !strings.Contains(err.Error(), tc.names) {
				t.Fatalf("TLSConfig = %v, want an error naming %s", err, tc.names)
			}
		})
	}
}

func TestSettingsNeverPrintToken(t *testing.T) {
	const secret = "tok-3f9a-secret"
	s := Settings{Endpoint: "https://gw:1", Name: "dev", Workspace: "default", BearerToken: secret, CACertFile: "/c/ca.crt"}
	var outputs []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%d", "%T %v"} {
		outputs = append(outputs, fmt.Sprintf(verb, s), fmt.Sprintf(verb, &s))
	}
	outputs = append(outputs, fmt.Sprint(s), fmt.Sprintln([]Settings{s}), s.String())
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("gateway", "settings", s)
	slog.New(slog.NewTextHandler(&logs, nil)).Info("gateway", "settings", s)
	outputs = append(outputs, logs.String())
	js, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	outputs = append(outputs, string(js))
	for _, out := range outputs {
		if strings.Contains(out, secret) {
			t.Errorf("token printed: %s", out)
		}
	}
	if !strings.Contains(s.String(), "bearer token") || !strings.Contains(logs.String(), `"bearer_token":true`) {
		t.Errorf("the token's presence should show: %s / %s", s, logs.String())
	}
	if !strings.Contains(s.String(), `"dev"`) || !strings.Contains(s.String(), "https://gw:1") {
		t.Errorf("String = %s, want name and endpoint", s)
	}
}
