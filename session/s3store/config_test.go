package s3store

import (
	"testing"
	"time"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		in             string
		bucket, prefix string
		bad            bool
	}{
		{in: "s3://bucket", bucket: "bucket"},
		{in: "s3://bucket/", bucket: "bucket"},
		{in: "s3://bucket/ferry", bucket: "bucket", prefix: "ferry"},
		{in: "s3://bucket/ferry/sessions/", bucket: "bucket", prefix: "ferry/sessions/"},
		{in: "s3://my.bucket-1/a/b", bucket: "my.bucket-1", prefix: "a/b"},
		{in: "", bad: true},
		{in: "bucket/prefix", bad: true},
		{in: "https://bucket/prefix", bad: true},
		{in: "s3:///prefix", bad: true},
		{in: "s3://bucket/a/../b", bad: true},
		{in: "s3://bucket//a", bad: true},
		{in: "s3://bucket/a?x=1", bad: true},
		{in: "s3://user@bucket/a", bad: true},
		{in: "s3://bucket:9000/a", bad: true},
	} {
		c, err := ParseURL(tc.in)
		switch {
		case tc.bad && err == nil:
			t.Errorf("ParseURL(%q) = %+v, want an error", tc.in, c)
		case !tc.bad && err != nil:
			t.Errorf("ParseURL(%q): %v", tc.in, err)
		case !tc.bad && (c.Bucket != tc.bucket || c.Prefix != tc.prefix):
			t.Errorf("ParseURL(%q) = bucket %q prefix %q, want %q %q", tc.in, c.Bucket, c.Prefix, tc.bucket, tc.prefix)
		}
	}
}

func TestFromEnv(t *testing.T) {
	env := map[string]string{
		"AWS_ENDPOINT_URL":      "http://generic:9000",
		"AWS_ENDPOINT_URL_S3":   "http://s3only:9000",
		"AWS_DEFAULT_REGION":    "eu-west-1",
		"AWS_ACCESS_KEY_ID":     "envkey",
		"AWS_SECRET_ACCESS_KEY": "envsecret",
		"AWS_SESSION_TOKEN":     "envtoken",
	}
	getenv := func(k string) string { return env[k] }
	c := fromEnv(Config{Bucket: "b"}, getenv)
	// Credentials are the chain's, in New: never copied into the Config.
	if c.Endpoint != "http://s3only:9000" || c.Region != "eu-west-1" || c.AccessKeyID != "" || c.SecretAccessKey != "" || c.SessionToken != "" || c.Bucket != "b" {
		t.Errorf("from the environment: %+v", c)
	}
	env["AWS_REGION"] = "us-west-2"
	c = fromEnv(Config{Endpoint: "http://flag:1", AccessKeyID: "k", SecretAccessKey: "s"}, getenv)
	if c.Endpoint != "http://flag:1" || c.Region != "us-west-2" || c.AccessKeyID != "k" || c.SecretAccessKey != "s" || c.SessionToken != "" {
		t.Errorf("explicit fields must win: %+v", c)
	}
}

func TestValidateCommit(t *testing.T) {
	base := Config{Bucket: "b", AccessKeyID: "k", SecretAccessKey: "s"}
	for _, tc := range []struct {
		mod func(*Config)
		ok  bool
	}{
		{func(*Config) {}, true},
		{func(c *Config) { c.Commit = CommitLease }, true},
		{func(c *Config) { c.Commit = "sometimes" }, false},
		{func(c *Config) { c.LeaseSettle, c.LeaseTTL = time.Second, time.Second }, false},
		{func(c *Config) { c.LeaseSettle = -time.Second }, false},
		{func(c *Config) { c.LeaseSettle = time.Minute }, false}, // over twice the default TTL
	} {
		c := base
		tc.mod(&c)
		c.applyDefaults()
		if err := c.validate(); (err == nil) != tc.ok {
			t.Errorf("validate(%+v) = %v, want ok %v", c, err, tc.ok)
		}
	}
}
