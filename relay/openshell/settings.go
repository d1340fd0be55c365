package openshell

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// DefaultPort is the port of an OpenShell gateway whose endpoint URL names
// none.
const DefaultPort = 17670

// Environment variables read by Resolve, with the openshell CLI's meaning.
const (
	EnvGateway   = "OPENSHELL_GATEWAY"          // a stored gateway's name
	EnvEndpoint  = "OPENSHELL_GATEWAY_ENDPOINT" // a gateway URL
	EnvInsecure  = "OPENSHELL_GATEWAY_INSECURE" // skip server certificate verification
	EnvWorkspace = "OPENSHELL_WORKSPACE"        // default "default"
	EnvSystemDir = "OPENSHELL_SYSTEM_GATEWAY_DIR"
)

// DefaultWorkspace is the workspace used when OPENSHELL_WORKSPACE is unset.
const DefaultWorkspace = "default"

const defaultSystemDir = "/etc/openshell"

// tokenSkew treats an OIDC token as expired this long before its expiry,
// as the openshell CLI does, so that it does not lapse in flight.
const tokenSkew = 30 * time.Second

var (
	// ErrNoGateway means nothing selects a gateway: no --gateway flag, no
	// OPENSHELL_GATEWAY_ENDPOINT or OPENSHELL_GATEWAY, no active gateway.
	ErrNoGateway = errors.New("openshell: no active gateway")
	// ErrUnknownGateway means a gateway name has no metadata.json, or is
	// not a valid name.
	ErrUnknownGateway = errors.New("openshell: unknown gateway")
	// ErrBadEndpoint means a gateway URL is not http(s)://host[:port].
	ErrBadEndpoint = errors.New("openshell: bad gateway endpoint")
	// ErrUnsupportedAuth means the gateway's auth_mode is one ferry does
	// not speak (cloudflare_jwt, or a mode newer than this code).
	ErrUnsupportedAuth = errors.New("openshell: unsupported gateway auth mode")
	// ErrLoginRequired means the gateway uses OIDC and its token is missing
	// or expired. ferry never refreshes tokens; the openshell CLI does.
	ErrLoginRequired = errors.New("openshell: gateway login required")
	// ErrNoCredentials means an mTLS file the gateway needs is missing.
	ErrNoCredentials = errors.New("openshell: missing gateway credentials")
)

// Settings say how to reach one OpenShell gateway. Resolve fills them the
// way the openshell CLI does; a caller may also build them by hand.
//
// BearerToken is a secret: String, Format and LogValue never print it, and
// it is not marshalled to JSON.
type Settings struct {
	// Endpoint is the gateway's URL, scheme://host:port: http means
	// plaintext, https means TLS.
	Endpoint string
	// Name is the stored gateway's name; empty when the endpoint came from
	// a flag or the environment and matches no stored gateway.
	Name string
	// Workspace is the OpenShell workspace that sandboxes are created in.
	Workspace string
	// CACertFile is a PEM file holding the only CAs trusted for the
	// gateway's certificate; empty trusts the system roots.
	CACertFile string
	// ClientCertFile and ClientKeyFile, set together or not at all, are the
	// PEM client certificate and key presented to the gateway (mTLS).
	ClientCertFile string
	ClientKeyFile  string
	// Insecure skips verification of the gateway's certificate and, as
	// upstream, presents no client certificate. It has no effect on http.
	Insecure bool
	// BearerToken, when set, is sent on every call as
	// "authorization: Bearer <token>".
	BearerToken string `json:"-"`
}

// Sources are where Resolve looks. The zero value reads this process's
// environment and the user's and system's openshell directories.
type Sources struct {
	// Endpoint is ferry's --gateway flag, a URL; empty when not given.
	Endpoint string
	// Getenv reads the environment; nil means os.Getenv.
	Getenv func(string) string
	// ConfigDir is the user's openshell directory; empty means
	// $XDG_CONFIG_HOME/openshell, else $HOME/.config/openshell.
	ConfigDir string
	// SystemDir is the system-wide openshell directory; empty means
	// $OPENSHELL_SYSTEM_GATEWAY_DIR when it is absolute, else /etc/openshell.
	SystemDir string
	// Now is the clock for token expiry; nil means time.Now.
	Now func() time.Time
}

// Resolve finds the gateway the openshell CLI would use, in its order:
//
//  1. an explicit endpoint, src.Endpoint or else OPENSHELL_GATEWAY_ENDPOINT,
//     used as is. Its name is OPENSHELL_GATEWAY when set, else that of the
//     stored gateway whose gateway_endpoint equals it (ignoring a trailing
//     "/"; the active gateway is checked first), else none;
//  2. the gateway named by OPENSHELL_GATEWAY;
//  3. the active gateway: the user's active_gateway file, else the system's.
//
// A gateway's metadata.json in the user directory shadows the system one.
// Credentials come from the user directory only: https needs
// mtls/{ca.crt,tls.crt,tls.key} unless the gateway uses OIDC, in which case
// the token in oidc_token.json is required and unexpired, and the mtls files
// are used if present. With OPENSHELL_GATEWAY_INSECURE no mtls file is used.
//
// Limitations: ferry does not refresh OIDC tokens (ErrLoginRequired tells
// the user to log in with the openshell CLI) and does not speak
// cloudflare_jwt (ErrUnsupportedAuth).
func Resolve(src Sources) (Settings, error) {
	r := newResolver(src)
	return r.resolve()
}

type resolver struct {
	flag      string
	getenv    func(string) string
	userDir   string // "" when neither XDG_CONFIG_HOME nor HOME is set
	systemDir string
	now       func() time.Time
}

func newResolver(src Sources) *resolver {
	r := &resolver{flag: src.Endpoint, getenv: src.Getenv, userDir: src.ConfigDir, systemDir: src.SystemDir, now: src.Now}
	if r.getenv == nil {
		r.getenv = os.Getenv
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.userDir == "" {
		if xdg := r.getenv("XDG_CONFIG_HOME"); xdg != "" {
			r.userDir = filepath.Join(xdg, "openshell")
		} else if home := r.getenv("HOME"); home != "" {
			r.userDir = filepath.Join(home, ".config", "openshell")
		}
	}
	if r.systemDir == "" {
		r.systemDir = defaultSystemDir
		if d := r.getenv(EnvSystemDir); d != "" && filepath.IsAbs(d) {
			r.systemDir = d
		}
	}
	return r
}

// env returns the variable with surrounding space removed.
func (r *resolver) env(key string) string { return strings.TrimSpace(r.getenv(key)) }

func (r *resolver) resolve() (Settings, error) {
	s := Settings{
		Workspace: r.env(EnvWorkspace),
		Insecure:  parseInsecure(r.getenv(EnvInsecure)),
	}
	if s.Workspace == "" {
		s.Workspace = DefaultWorkspace
	}

	var (
		md       *metadata
		err      error
		endpoint = strings.TrimSpace(r.flag)
		origin   = "--gateway"
		envName  = r.env(EnvGateway)
	)
	if endpoint == "" {
		endpoint, origin = r.env(EnvEndpoint), EnvEndpoint
	}
	switch {
	case endpoint != "" && envName != "":
		if !validName(envName) {
			return Settings{}, fmt.Errorf("%w %q from %s: not a single path component", ErrUnknownGateway, envName, EnvGateway)
		}
		s.Name = envName
		// The endpoint wins; metadata, if any, only supplies the auth mode.
		if md, err = r.metadata(envName); err != nil {
			return Settings{}, err
		}
	case endpoint != "":
		s.Name, md = r.findByEndpoint(endpoint)
	case envName != "":
		if !validName(envName) {
			return Settings{}, fmt.Errorf("%w %q from %s: not a single path component", ErrUnknownGateway, envName, EnvGateway)
		}
		if md, err = r.mustMetadata(envName); err != nil {
			return Settings{}, err
		}
		s.Name = envName
	default:
		name, err := r.activeName()
		if err != nil {
			return Settings{}, err
		}
		if name == "" {
			return Settings{}, fmt.Errorf("%w: pass --gateway URL, set %s, or select a gateway with the openshell CLI", ErrNoGateway, EnvEndpoint)
		}
		if md, err = r.mustMetadata(name); err != nil {
			return Settings{}, err
		}
		s.Name = name
	}
	if endpoint == "" { // cases 3 and 4: the stored gateway's own endpoint
		endpoint, origin = md.Endpoint, md.path
		if strings.TrimSpace(endpoint) == "" {
			return Settings{}, fmt.Errorf("%w: %s has no gateway_endpoint", ErrBadEndpoint, md.path)
		}
	}

	u, err := parseEndpoint(endpoint)
	if err != nil {
		return Settings{}, fmt.Errorf("%w (from %s)", err, origin)
	}
	s.Endpoint = u.String()
	if err := r.credentials(&s, md, u); err != nil {
		return Settings{}, err
	}
	return s, nil
}

// credentials fills the token and mTLS files of s.
func (r *resolver) credentials(s *Settings, md *metadata, u *url.URL) error {
	mode := ""
	if md != nil {
		mode = md.AuthMode
		switch mode {
		case "", "mtls", "plaintext", "oidc":
		case "cloudflare_jwt":
			return fmt.Errorf("%w %q for gateway %q (%s): use the openshell CLI for Cloudflare Access gateways", ErrUnsupportedAuth, mode, s.Name, md.path)
		default:
			return fmt.Errorf("%w %q for gateway %q (%s)", ErrUnsupportedAuth, mode, s.Name, md.path)
		}
	}

	// The token is independent of the transport: the caller decides whether
	// to send it over plaintext.
	if s.Name != "" && r.userDir != "" && (mode == "oidc" || mode == "") {
		tok, err := r.token(s.Name, mode == "oidc")
		if err != nil {
			return err
		}
		s.BearerToken = tok
	} else if mode == "oidc" {
		return fmt.Errorf("%w: gateway %q uses OIDC but there is no openshell config directory (set HOME or XDG_CONFIG_HOME)", ErrLoginRequired, s.Name)
	}

	if u.Scheme != "https" || s.Insecure {
		return nil
	}
	label := s.Name
	if label == "" {
		label = u.Hostname()
		if h := strings.ToLower(label); h == "127.0.0.1" || h == "localhost" {
			label = "openshell"
		}
	}
	if r.userDir == "" {
		if s.BearerToken != "" {
			return nil
		}
		return fmt.Errorf("%w: %s needs mTLS files but there is no openshell config directory (set HOME or XDG_CONFIG_HOME)", ErrNoCredentials, s.Endpoint)
	}
	dir := filepath.Join(r.userDir, "gateways", sanitize(label), "mtls")
	ca, crt, key := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	var present [3]bool
	for i, p := range []string{ca, crt, key} {
		ok, err := exists(p)
		if err != nil {
			return err
		}
		if !ok && s.BearerToken == "" {
			return fmt.Errorf("%w: %s does not exist (https without an OIDC token needs ca.crt, tls.crt and tls.key in %s)", ErrNoCredentials, p, dir)
		}
		present[i] = ok
	}
	if present[1] != present[2] {
		missing := key
		if !present[1] {
			missing = crt
		}
		return fmt.Errorf("%w: %s does not exist (tls.crt and tls.key go together)", ErrNoCredentials, missing)
	}
	if present[0] {
		s.CACertFile = ca
	}
	if present[1] {
		s.ClientCertFile, s.ClientKeyFile = crt, key
	}
	return nil
}

// exists reports whether path exists; errors other than "does not exist"
// are returned.
func exists(path string) (bool, error) {
	_, err := os.Stat(path)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return false, fmt.Errorf("openshell: stat %w", err)
}

// metadata is the part of gateways/<name>/metadata.json that ferry reads.
type metadata struct {
	Endpoint string `json:"gateway_endpoint"`
	AuthMode string `json:"auth_mode"`
	path     string
}

// metadata reads name's metadata.json, the user's shadowing the system's.
// A gateway with neither returns nil, nil.
func (r *resolver) metadata(name string) (*metadata, error) {
	for _, root := range []string{r.userDir, r.systemDir} {
		if root == "" {
			continue
		}
		path := filepath.Join(root, "gateways", name, "metadata.json")
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("openshell: read gateway metadata: %w", err)
		}
		md := &metadata{path: path}
		if err := json.Unmarshal(b, md); err != nil {
			return nil, fmt.Errorf("openshell: parse gateway metadata %s: %w", path, err)
		}
		return md, nil
	}
	return nil, nil
}

// mustMetadata is metadata, with a missing file an ErrUnknownGateway.
func (r *resolver) mustMetadata(name string) (*metadata, error) {
	md, err := r.metadata(name)
	if err != nil {
		return nil, err
	}
	if md == nil {
		var where []string
		for _, root := range []string{r.userDir, r.systemDir} {
			if root != "" {
				where = append(where, filepath.Join(root, "gateways", name, "metadata.json"))
			}
		}
		return nil, fmt.Errorf("%w %q: no %s", ErrUnknownGateway, name, strings.Join(where, " or "))
	}
	return md, nil
}

// activeName returns the active gateway's name, or "" when none is set.
// A file that is empty or holds more than one path component is ignored.
func (r *resolver) activeName() (string, error) {
	for _, root := range []string{r.userDir, r.systemDir} {
		if root == "" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, "active_gateway"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("openshell: read active gateway: %w", err)
		}
		if name := strings.TrimSpace(string(b)); validName(name) {
			return name, nil
		}
	}
	return "", nil
}

// findByEndpoint returns the stored gateway whose gateway_endpoint equals
// endpoint up to a trailing "/", trying the active gateway first, then the
// user's gateways and the system's, each in name order. Unreadable
// metadata is skipped: this only names an endpoint that is already known.
func (r *resolver) findByEndpoint(endpoint string) (string, *metadata) {
	want := strings.TrimRight(endpoint, "/")
	var names []string
	if active, _ := r.activeName(); active != "" {
		names = append(names, active)
	}
	for _, root := range []string{r.userDir, r.systemDir} {
		if root == "" {
			continue
		}
		entries, _ := os.ReadDir(filepath.Join(root, "gateways"))
		for _, e := range entries {
			if e.IsDir() && validName(e.Name()) {
				names = append(names, e.Name())
			}
		}
	}
	seen := make(map[string]bool)
	for _, name := range names {
		if seen[name] {
			continue
		}
		seen[name] = true
		md, err := r.metadata(name)
		if err == nil && md != nil && strings.TrimRight(strings.TrimSpace(md.Endpoint), "/") == want {
			return name, md
		}
	}
	return "", nil
}

// oidcToken is the part of gateways/<name>/oidc_token.json that ferry
// reads; the refresh token is deliberately not loaded.
type oidcToken struct {
	AccessToken string `json:"access_token"`
	ExpiresAt   *int64 `json:"expires_at"` // unix seconds; absent = no expiry
}

// token returns name's OIDC access token. A missing file is
// ErrLoginRequired when required, else "".
func (r *resolver) token(name string, required bool) (string, error) {
	path := filepath.Join(r.userDir, "gateways", name, "oidc_token.json")
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if required {
			return "", fmt.Errorf("%w: gateway %q uses OIDC and %s does not exist; log in with the openshell CLI", ErrLoginRequired, name, path)
		}
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("openshell: read OIDC token: %w", err)
	}
	var tok oidcToken
	if err := json.Unmarshal(b, &tok); err != nil {
		// The json error never quotes the token's bytes.
		return "", fmt.Errorf("openshell: parse OIDC token %s: %w", path, err)
	}
	if tok.AccessToken == "" {
		return "", fmt.Errorf("%w: %s has no access_token; log in with the openshell CLI", ErrLoginRequired, path)
	}
	if tok.ExpiresAt != nil {
		exp := time.Unix(*tok.ExpiresAt, 0)
		if !r.now().Add(tokenSkew).Before(exp) {
			return "", fmt.Errorf("%w: the OIDC token for gateway %q (%s) expired at %s; ferry does not refresh tokens, log in again with the openshell CLI",
				ErrLoginRequired, name, path, exp.UTC().Format(time.RFC3339))
		}
	}
	return tok.AccessToken, nil
}

// parseInsecure follows the openshell CLI: any non-empty value other than
// "0" and "false" is true.
func parseInsecure(v string) bool {
	v = strings.TrimSpace(v)
	return v != "" && v != "0" && !strings.EqualFold(v, "false")
}

// validName reports whether name can be a gateway directory: one path
// component, not "." or "..".
func validName(name string) bool {
	return name != "" && name != "." && name != ".." &&
		!strings.ContainsAny(name, "/\x00") && name == filepath.Base(name)
}

// sanitize maps a gateway name or host to its mtls directory name as the
// openshell CLI does: [A-Za-z0-9._-] stay, every other character becomes
// "_".
func sanitize(name string) string {
	return strings.Map(func(c rune) rune {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
			return c
		}
		return '_'
	}, name)
}

// parseEndpoint checks raw is http(s)://host[:port][/] and returns it as
// scheme://host:port, the port defaulting to DefaultPort. A path, query,
// fragment or user info is refused: gRPC cannot carry them.
func parseEndpoint(raw string) (*url.URL, error) {
	raw = strings.TrimSpace(raw)
	if !strings.Contains(raw, "://") {
		return nil, fmt.Errorf("%w %q: no scheme (want http:// or https://)", ErrBadEndpoint, raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrBadEndpoint, raw, errors.Unwrap(err))
	}
	shown := raw
	if u.User != nil {
		shown = u.Redacted() // never echo a password
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%w %q: scheme %q (want http or https)", ErrBadEndpoint, shown, u.Scheme)
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%w %q: only scheme, host and port are allowed", ErrBadEndpoint, shown)
	}
	host := u.Hostname()
	if host == "" {
		return nil, fmt.Errorf("%w %q: empty host", ErrBadEndpoint, shown)
	}
	port := u.Port()
	if port == "" {
		port = strconv.Itoa(DefaultPort)
	} else if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return nil, fmt.Errorf("%w %q: port %q", ErrBadEndpoint, shown, port)
	}
	return &url.URL{Scheme: u.Scheme, Host: net.JoinHostPort(host, port)}, nil
}

// Target returns the gateway's "host:port" for grpc.NewClient, or "" if
// Endpoint is not a valid endpoint (Resolve never returns one).
func (s Settings) Target() string {
	u, err := parseEndpoint(s.Endpoint)
	if err != nil {
		return ""
	}
	return u.Host
}

// TLSConfig returns the TLS configuration for Endpoint: nil for http. For
// https it trusts CACertFile (else the system roots), presents the client
// certificate when set, verifies the endpoint's own host, and requires TLS
// 1.2. With Insecure it verifies nothing and presents no certificate.
// Errors name the file at fault.
func (s Settings) TLSConfig() (*tls.Config, error) {
	u, err := parseEndpoint(s.Endpoint)
	if err != nil {
		return nil, err
	}
	if u.Scheme == "http" {
		return nil, nil
	}
	cfg := &tls.Config{
		ServerName: u.Hostname(),
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2"},
	}
	if s.Insecure {
		cfg.InsecureSkipVerify = true
		return cfg, nil
	}
	if s.CACertFile != "" {
		b, err := os.ReadFile(s.CACertFile)
		if err != nil {
			return nil, fmt.Errorf("openshell: read gateway CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("openshell: read gateway CA %s: no PEM certificate", s.CACertFile)
		}
		cfg.RootCAs = pool
	}
	if (s.ClientCertFile == "") != (s.ClientKeyFile == "") {
		return nil, fmt.Errorf("openshell: client certificate %q and key %q must be set together", s.ClientCertFile, s.ClientKeyFile)
	}
	if s.ClientCertFile != "" {
		crt, err := os.ReadFile(s.ClientCertFile)
		if err != nil {
			return nil, fmt.Errorf("openshell: read client certificate: %w", err)
		}
		key, err := os.ReadFile(s.ClientKeyFile)
		if err != nil {
			return nil, fmt.Errorf("openshell: read client key: %w", err)
		}
		pair, err := tls.X509KeyPair(crt, key)
		if err != nil {
			return nil, fmt.Errorf("openshell: load client certificate %s and key %s: %w", s.ClientCertFile, s.ClientKeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// String describes s without the bearer token.
func (s Settings) String() string {
	var b strings.Builder
	b.WriteString(s.Endpoint)
	if s.Name != "" {
		fmt.Fprintf(&b, " (gateway %q", s.Name)
	} else {
		b.WriteString(" (no stored gateway")
	}
	fmt.Fprintf(&b, ", workspace %q", s.Workspace)
	switch {
	case strings.HasPrefix(s.Endpoint, "http://"):
		b.WriteString(", plaintext")
	case s.Insecure:
		b.WriteString(", TLS without verification")
	default:
		if s.CACertFile != "" {
			fmt.Fprintf(&b, ", CA %s", s.CACertFile)
		} else {
			b.WriteString(", system CAs")
		}
		if s.ClientCertFile != "" {
			fmt.Fprintf(&b, ", client certificate %s", s.ClientCertFile)
		}
	}
	if s.BearerToken != "" {
		b.WriteString(", bearer token")
	}
	b.WriteString(")")
	return b.String()
}

// Format prints String for every verb, so that no verb (%#v, %d, ...)
// reaches the bearer token through reflection.
func (s Settings) Format(f fmt.State, _ rune) { io.WriteString(f, s.String()) }

// LogValue implements slog.LogValuer; the bearer token is reported only as
// present or not.
func (s Settings) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("endpoint", s.Endpoint),
		slog.String("name", s.Name),
		slog.String("workspace", s.Workspace),
		slog.String("ca_cert_file", s.CACertFile),
		slog.String("client_cert_file", s.ClientCertFile),
		slog.String("client_key_file", s.ClientKeyFile),
		slog.Bool("insecure", s.Insecure),
		slog.Bool("bearer_token", s.BearerToken != ""),
	)
}

var (
	_ fmt.Stringer   = Settings{}
	_ fmt.Formatter  = Settings{}
	_ slog.LogValuer = Settings{}
)
