package s3store

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// DefaultEndpoint is the endpoint of a Config that names none: AWS S3.
const DefaultEndpoint = "https://s3.amazonaws.com"

// Config says where a Backend keeps its objects and how it signs in. It
// is not changed after it is passed to New.
type Config struct {
	// Endpoint is the server's URL, http or https, with no path;
	// DefaultEndpoint if empty. Plain http is for loopback and tests.
	Endpoint string
	// Bucket must exist; New does not create it.
	Bucket string
	// Prefix is prepended to every object name; a "/" is added if it has
	// none. Empty: the whole bucket.
	Prefix string
	// Region is the bucket's region; empty asks the server.
	Region string

	// AccessKeyID and SecretAccessKey, when set, are the credentials.
	// Left empty, New takes them from the usual AWS chain, in order: the
	// environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
	// AWS_SESSION_TOKEN), the shared credentials file
	// (AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials; profile
	// AWS_PROFILE, else "default"), then the instance's or container's
	// role (ECS and EKS variables, else the instance metadata service).
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string // for temporary credentials; may be empty

	// Transport carries the requests; nil is minio-go's default.
	Transport http.RoundTripper

	// Commit is how an exclusive Put (a session commit) is kept
	// exclusive; CommitAuto if empty.
	Commit CommitMode
	// LeaseSettle is how long the lease fallback waits between writing
	// a lease and reading it back, and so the longest a holder may take
	// from reading its lease back to its commit landing; it must cover
	// a few requests to the server. DefaultLeaseSettle if zero.
	LeaseSettle time.Duration
	// LeaseTTL is how long a lease that was not released blocks the
	// other committers of its directory (a holder that crashed): a lease
	// is taken over once its writer's stated expiry has passed, or once
	// it has been seen unchanged for LeaseTTL. At least twice
	// LeaseSettle; DefaultLeaseTTL if zero.
	LeaseTTL time.Duration
}

// CommitMode says how a Backend makes an exclusive Put exclusive.
type CommitMode string

const (
	// CommitAuto probes the server in New and uses conditional writes
	// where it honours them, else the lease.
	CommitAuto CommitMode = ""
	// CommitConditional requires conditional writes: New fails with
	// ErrNoConditionalWrites on a server that does not honour them.
	CommitConditional CommitMode = "conditional"
	// CommitLease always uses the lease, without probing: for a server
	// whose conditional writes cannot be trusted, and for tests.
	CommitLease CommitMode = "lease"
)

// Defaults of Config.LeaseSettle and Config.LeaseTTL.
const (
	DefaultLeaseSettle = 2 * time.Second
	DefaultLeaseTTL    = 30 * time.Second
)

func (c *Config) applyDefaults() {
	if c.LeaseSettle == 0 {
		c.LeaseSettle = DefaultLeaseSettle
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
}

// FromEnv returns c with its empty endpoint and region filled from the
// usual AWS variables: AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, AWS_REGION
// or AWS_DEFAULT_REGION. A field already set (a flag such as
// --s3-endpoint) wins over the environment. Credentials are not read
// here: New takes them from the AWS chain (see Config.AccessKeyID).
func FromEnv(c Config) Config {
	return fromEnv(c, os.Getenv)
}

func fromEnv(c Config, getenv func(string) string) Config {
	first := func(names ...string) string {
		for _, n := range names {
			if v := getenv(n); v != "" {
				return v
			}
		}
		return ""
	}
	if c.Endpoint == "" {
		c.Endpoint = first("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
	}
	if c.Region == "" {
		c.Region = first("AWS_REGION", "AWS_DEFAULT_REGION")
	}
	return c
}

// ParseURL parses a store URL, s3://BUCKET or s3://BUCKET/PREFIX, into a
// Config with Bucket and Prefix set. The prefix is kept as written, but
// for a trailing "/" added by New; it must be a clean relative path.
func ParseURL(s string) (Config, error) {
	u, err := url.Parse(s)
	if err != nil {
		return Config{}, fmt.Errorf("parse store url: %w", err)
	}
	if u.Scheme != "s3" {
		return Config{}, fmt.Errorf("parse store url %q: scheme is not s3", s)
	}
	if u.Host == "" {
		return Config{}, fmt.Errorf("parse store url %q: no bucket", s)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Port() != "" {
		return Config{}, fmt.Errorf("parse store url %q: want s3://BUCKET/PREFIX only", s)
	}
	c := Config{Bucket: u.Host, Prefix: strings.TrimPrefix(u.Path, "/")}
	if _, err := prefixOf(c.Prefix); err != nil {
		return Config{}, fmt.Errorf("parse store url %q: %w", s, err)
	}
	return c, nil
}

// prefixOf returns the key prefix of Config.Prefix p: empty, or a clean
// relative path ending in "/".
func prefixOf(p string) (string, error) {
	p = strings.TrimSuffix(p, "/")
	if p == "" {
		return "", nil
	}
	if !validName(p) {
		return "", fmt.Errorf("bad prefix %q", p)
	}
	return p + "/", nil
}

// endpointOf returns the host and whether to use TLS for endpoint e.
func endpointOf(e string) (host string, secure bool, err error) {
	if e == "" {
		e = DefaultEndpoint
	}
	u, err := url.Parse(e)
	if err != nil {
		return "", false, fmt.Errorf("parse endpoint: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", false, fmt.Errorf("endpoint %q: scheme is not http or https", e)
	}
	if u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return "", false, fmt.Errorf("endpoint %q: want a URL with only a scheme, host and port", e)
	}
	return u.Host, u.Scheme == "https", nil
}

func (c *Config) validate() error {
	if c.Bucket == "" {
		return errors.New("s3store: no bucket")
	}
	if (c.AccessKeyID == "") != (c.SecretAccessKey == "") {
		return errors.New("s3store: an access key id needs its secret key, and a secret key its id")
	}
	switch c.Commit {
	case CommitAuto, CommitConditional, CommitLease:
	default:
		return fmt.Errorf("s3store: commit mode %q: want %q, %q or empty", c.Commit, CommitConditional, CommitLease)
	}
	if c.LeaseSettle < 0 || c.LeaseTTL < 2*c.LeaseSettle {
		return fmt.Errorf("s3store: lease settle %v and TTL %v: want a TTL of at least twice the settle time", c.LeaseSettle, c.LeaseTTL)
	}
	return nil
}
