package s3store

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
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

	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string // for temporary credentials; may be empty

	// Transport carries the requests; nil is minio-go's default.
	Transport http.RoundTripper
}

// FromEnv returns c with its empty fields filled from the usual AWS
// variables: AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, AWS_REGION or
// AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
// AWS_SESSION_TOKEN. A field already set (a flag such as --s3-endpoint)
// wins over the environment. The keys come as a pair: if either is set
// in c, neither is read from the environment, nor is the session token.
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
	if c.AccessKeyID == "" && c.SecretAccessKey == "" {
		c.AccessKeyID = getenv("AWS_ACCESS_KEY_ID")
		c.SecretAccessKey = getenv("AWS_SECRET_ACCESS_KEY")
		if c.SessionToken == "" {
			c.SessionToken = getenv("AWS_SESSION_TOKEN")
		}
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
	if c.AccessKeyID == "" || c.SecretAccessKey == "" {
		return errors.New("s3store: no credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")
	}
	return nil
}
