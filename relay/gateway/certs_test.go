package gateway

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("%s: no CERTIFICATE block", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestWriteCertsLayout(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	if err := WriteCerts(dir, []string{"gw.example.com", "10.1.2.3", "[fd00::1]", "localhost"}); err != nil {
		t.Fatal(err)
	}

	modes := map[string]fs.FileMode{
		"":               fs.ModeDir | 0o700,
		"client":         fs.ModeDir | 0o700,
		"ca.crt":         0o644,
		"ca.key":         0o600,
		"server.crt":     0o644,
		"server.key":     0o600,
		"client/ca.crt":  0o644,
		"client/tls.crt": 0o644,
		"client/tls.key": 0o600,
	}
	for name, want := range modes {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		// The umask may only remove bits; none of ours may be added.
		if got := fi.Mode(); got&^want != 0 || got.IsDir() != want.IsDir() || got.Perm()&0o600 != 0o600 {
			t.Errorf("%s: mode %v, want %v", name, got, want)
		}
	}
	entries, err := os.ReadDir(filepath.Join(dir, ClientDir))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{"ca.crt", "tls.crt", "tls.key"}; !slices.Equal(names, want) {
		t.Errorf("client dir holds %v, want exactly %v (an openshell mtls dir)", names, want)
	}

	caPEM, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	clientCAPEM, _ := os.ReadFile(filepath.Join(dir, "client", "ca.crt"))
	if !bytes.Equal(caPEM, clientCAPEM) {
		t.Error("client/ca.crt differs from ca.crt")
	}

	ca := readCert(t, filepath.Join(dir, "ca.crt"))
	if !ca.IsCA || ca.CheckSignatureFrom(ca) != nil {
		t.Error("ca.crt is not a self-signed CA")
	}
	if life := ca.NotAfter.Sub(time.Now()); life < 360*24*time.Hour || life > 366*24*time.Hour {
		t.Errorf("CA lasts %v, want about a year", life)
	}
	pub, ok := ca.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		t.Errorf("CA key is %T, want ECDSA P-256", ca.PublicKey)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)

	server := readCert(t, filepath.Join(dir, "server.crt"))
	if want := []string{"localhost", "gw.example.com"}; !slices.Equal(server.DNSNames, want) {
		t.Errorf("server DNS SANs %v, want %v", server.DNSNames, want)
	}
	var ips []string
	for _, ip := range server.IPAddresses {
		ips = append(ips, ip.String())
	}
	if want := []string{"127.0.0.1", "::1", "10.1.2.3", "fd00::1"}; !slices.Equal(ips, want) {
		t.Errorf("server IP SANs %v, want %v", ips, want)
	}
	for _, host := range []string{"localhost", "gw.example.com", "10.1.2.3", "fd00::1", "::1"} {
		if _, err := server.Verify(x509.VerifyOptions{DNSName: host, Roots: roots}); err != nil {
			t.Errorf("server certificate for %s: %v", host, err)
		}
	}
	if _, err := server.Verify(x509.VerifyOptions{DNSName: "other.example.com", Roots: roots}); err == nil {
		t.Error("server certificate verified for a host it does not name")
	}

	client := readCert(t, filepath.Join(dir, "client", "tls.crt"))
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("client certificate is usable as a server certificate")
	}
	if _, err := tls.LoadX509KeyPair(filepath.Join(dir, "client", "tls.crt"), filepath.Join(dir, "client", "tls.key")); err != nil {
		t.Errorf("client key pair: %v", err)
	}
}

func TestWriteCertsRefusesOverwrite(t *testing.T) {
	for _, existing := range []string{"ca.crt", "ca.key", "server.key", "client/tls.key"} {
		t.Run(existing, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, existing)
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("keep me"), 0o600); err != nil {
				t.Fatal(err)
			}
			err := WriteCerts(dir, nil)
			if !errors.Is(err, fs.ErrExist) || !strings.Contains(err.Error(), p) {
				t.Fatalf("WriteCerts over %s = %v, want fs.ErrExist naming it", existing, err)
			}
			if b, _ := os.ReadFile(p); string(b) != "keep me" {
				t.Errorf("%s was overwritten", existing)
			}
			for _, other := range []string{"ca.crt", "ca.key", "server.crt", "server.key", "client/ca.crt", "client/tls.crt", "client/tls.key"} {
				if other == existing {
					continue
				}
				if _, err := os.Stat(filepath.Join(dir, other)); err == nil {
					t.Errorf("%s written although %s existed", other, existing)
				}
			}
		})
	}
}

func TestWriteCertsBadHost(t *testing.T) {
	for _, host := range []string{"", "gw.example.com/x", "a b", "..", "host:80"} {
		dir := filepath.Join(t.TempDir(), "certs")
		err := WriteCerts(dir, []string{host})
		if err == nil || !strings.Contains(err.Error(), "host") {
			t.Errorf("WriteCerts(host %q) = %v, want an error naming the host", host, err)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("host %q: dir created although the host was refused", host)
		}
	}
}

func TestLoadServerTLSErrors(t *testing.T) {
	good := t.TempDir()
	if err := WriteCerts(good, nil); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	if err := WriteCerts(other, nil); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		edit  func(dir string) error
		names string // the file the error must name
	}{
		{"missing ca.crt", func(d string) error { return os.Remove(filepath.Join(d, "ca.crt")) }, "ca.crt"},
		{"missing server.crt", func(d string) error { return os.Remove(filepath.Join(d, "server.crt")) }, "server.crt"},
		{"missing server.key", func(d string) error { return os.Remove(filepath.Join(d, "server.key")) }, "server.key"},
		{"ca.crt not PEM", func(d string) error { return os.WriteFile(filepath.Join(d, "ca.crt"), []byte("junk"), 0o644) }, "ca.crt"},
		{"key of another certificate", func(d string) error {
			b, err := os.ReadFile(filepath.Join(other, "server.key"))
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(d, "server.key"), b, 0o600)
		}, "server.key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.CopyFS(dir, os.DirFS(good)); err != nil {
				t.Fatal(err)
			}
			if err := tt.edit(dir); err != nil {
				t.Fatal(err)
			}
			_, err := LoadServerTLS(dir)
			if want := filepath.Join(dir, tt.names); err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("LoadServerTLS = %v, want an error naming %s", err, want)
			}
		})
	}
}

// clientTLS builds a client configuration from an openshell-style mtls
// directory, as ferry's client does.
func clientTLS(t *testing.T, mtls string, withCert bool) *tls.Config {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(mtls, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatal("no CA in ca.crt")
	}
	cfg := &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}
	if withCert {
		pair, err := tls.LoadX509KeyPair(filepath.Join(mtls, "tls.crt"), filepath.Join(mtls, "tls.key"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}

// handshake runs one TLS connection over loopback TCP. The server writes
// one byte after its handshake and the client reads it, so a client
// certificate refused after the client's TLS 1.3 handshake completed still
// fails on the client side.
func handshake(t *testing.T, server, client *tls.Config) (serverErr, clientErr error, proto string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		tc := tls.Server(c, server)
		if err := tc.Handshake(); err != nil {
			done <- err
			return
		}
		_, err = tc.Write([]byte{1})
		done <- err
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	tc := tls.Client(c, client)
	clientErr = tc.Handshake()
	if clientErr == nil {
		proto = tc.ConnectionState().NegotiatedProtocol
		_, clientErr = io.ReadFull(tc, make([]byte, 1))
	}
	return <-done, clientErr, proto
}

func TestServerTLSHandshake(t *testing.T) {
	dir := t.TempDir()
	if err := WriteCerts(dir, []string{"gw.example.com"}); err != nil {
		t.Fatal(err)
	}
	strangers := t.TempDir()
	if err := WriteCerts(strangers, nil); err != nil {
		t.Fatal(err)
	}
	server, err := LoadServerTLS(dir)
	if err != nil {
		t.Fatal(err)
	}
	if server.ClientAuth != tls.RequireAndVerifyClientCert || server.MinVersion < tls.VersionTLS12 || !slices.Contains(server.NextProtos, "h2") {
		t.Fatalf("server config: ClientAuth %v, MinVersion %x, NextProtos %v", server.ClientAuth, server.MinVersion, server.NextProtos)
	}
	mtls := filepath.Join(dir, ClientDir)

	tests := []struct {
		name   string
		client func() *tls.Config
		ok     bool
	}{
		{"client from dir/client", func() *tls.Config { return clientTLS(t, mtls, true) }, true},
		{"by DNS name", func() *tls.Config {
			c := clientTLS(t, mtls, true)
			c.ServerName = "gw.example.com"
			return c
		}, true},
		{"by IP", func() *tls.Config {
			c := clientTLS(t, mtls, true)
			c.ServerName = "127.0.0.1"
			return c
		}, true},
		{"TLS 1.2", func() *tls.Config {
			c := clientTLS(t, mtls, true)
			c.MaxVersion = tls.VersionTLS12
			return c
		}, true},
		{"no client certificate", func() *tls.Config { return clientTLS(t, mtls, false) }, false},
		{"TLS 1.2 without client certificate", func() *tls.Config {
			c := clientTLS(t, mtls, false)
			c.MaxVersion = tls.VersionTLS12
			return c
		}, false},
		{"client certificate from another CA", func() *tls.Config {
			c := clientTLS(t, mtls, true)
			c.Certificates = clientTLS(t, filepath.Join(strangers, ClientDir), true).Certificates
			return c
		}, false},
		{"client trusting another CA", func() *tls.Config {
			c := clientTLS(t, mtls, true)
			c.RootCAs = clientTLS(t, filepath.Join(strangers, ClientDir), true).RootCAs
			return c
		}, false},
		{"host not in the certificate", func() *tls.Config {
			c := clientTLS(t, mtls, true)
			c.ServerName = "other.example.com"
			return c
		}, false},
		{"TLS 1.1", func() *tls.Config {
			c := clientTLS(t, mtls, true)
			c.MinVersion, c.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
			return c
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			serverErr, clientErr, proto := handshake(t, server, tt.client())
			if tt.ok {
				if serverErr != nil || clientErr != nil {
					t.Fatalf("handshake failed: server %v, client %v", serverErr, clientErr)
				}
				if proto != "h2" {
					t.Errorf("negotiated %q, want h2", proto)
				}
				return
			}
			if serverErr == nil || clientErr == nil {
				t.Fatalf("handshake should fail on both sides: server %v, client %v", serverErr, clientErr)
			}
		})
	}
}
