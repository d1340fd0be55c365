package gateway

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// certValidity is how long the certificates written by WriteCerts last.
const certValidity = 365 * 24 * time.Hour

// ClientDir is the subdirectory of WriteCerts' dir that has the layout of
// an openshell mtls directory (ca.crt, tls.crt, tls.key): copied to
// ~/.config/openshell/gateways/<name>/mtls it lets the openshell CLI and
// ferry reach the gateway.
const ClientDir = "client"

// Files written by WriteCerts under its dir.
const (
	caCertFile     = "ca.crt"
	caKeyFile      = "ca.key"
	serverCertFile = "server.crt"
	serverKeyFile  = "server.key"
)

// certFile is one PEM file to write, relative to WriteCerts' dir.
type certFile struct {
	name   string
	secret bool // a private key: mode 0600 instead of 0644
	data   []byte
}

// WriteCerts creates dir (mode 0700) and writes a fresh certificate
// authority, a server certificate signed by it and a client certificate
// signed by it:
//
//	dir/ca.crt, dir/ca.key            the CA
//	dir/server.crt, dir/server.key    for LoadServerTLS
//	dir/client/{ca.crt,tls.crt,tls.key}  an openshell mtls directory
//
// The server certificate is valid for "localhost", 127.0.0.1, ::1 and each
// of hosts (an IP address, bracketed or not, or a DNS name). Keys are ECDSA
// P-256 in PKCS #8, mode 0600; certificates last a year.
//
// WriteCerts never overwrites: if any of the files exists it writes nothing
// and the error names that file and wraps fs.ErrExist. If writing fails
// part way, the files it created are removed.
func WriteCerts(dir string, hosts []string) error {
	var dns []string
	var ips []net.IP
	seen := make(map[string]bool)
	for _, h := range append([]string{"localhost", "127.0.0.1", "::1"}, hosts...) {
		h = strings.TrimSpace(h)
		if ip := net.ParseIP(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")); ip != nil {
			if !seen[ip.String()] {
				seen[ip.String()] = true
				ips = append(ips, ip)
			}
			continue
		}
		if !validDNSName(h) {
			return fmt.Errorf("gateway: write certs: host %q is neither an IP address nor a DNS name", h)
		}
		if h = strings.ToLower(h); !seen[h] {
			seen[h] = true
			dns = append(dns, h)
		}
	}

	files := []string{
		caCertFile, caKeyFile, serverCertFile, serverKeyFile,
		filepath.Join(ClientDir, "ca.crt"), filepath.Join(ClientDir, "tls.crt"), filepath.Join(ClientDir, "tls.key"),
	}
	for _, f := range files {
		p := filepath.Join(dir, f)
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("gateway: write certs: %s: %w", p, fs.ErrExist)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("gateway: write certs: %w", err)
		}
	}

	now := time.Now()
	ca, err := newIssued(nil, &x509.Certificate{
		Subject:               pkix.Name{CommonName: "ferry gateway CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	})
	if err != nil {
		return err
	}
	server, err := newIssued(ca, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "ferry gateway"},
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.Add(certValidity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    dns,
		IPAddresses: ips,
	})
	if err != nil {
		return err
	}
	client, err := newIssued(ca, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "ferry client"},
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.Add(certValidity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return err
	}

	if err := os.MkdirAll(filepath.Join(dir, ClientDir), 0o700); err != nil {
		return fmt.Errorf("gateway: write certs: %w", err)
	}
	return writeNewFiles(dir, []certFile{
		{caCertFile, false, ca.certPEM},
		{caKeyFile, true, ca.keyPEM},
		{serverCertFile, false, server.certPEM},
		{serverKeyFile, true, server.keyPEM},
		{filepath.Join(ClientDir, "ca.crt"), false, ca.certPEM},
		{filepath.Join(ClientDir, "tls.crt"), false, client.certPEM},
		{filepath.Join(ClientDir, "tls.key"), true, client.keyPEM},
	})
}

// writeNewFiles creates each file exclusively; on failure it removes the
// ones it created.
func writeNewFiles(dir string, files []certFile) (err error) {
	var created []string
	defer func() {
		if err != nil {
			for _, p := range created {
				os.Remove(p)
			}
		}
	}()
	for _, f := range files {
		p := filepath.Join(dir, f.name)
		mode := os.FileMode(0o644)
		if f.secret {
			mode = 0o600
		}
		fh, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if err != nil {
			return fmt.Errorf("gateway: write certs: %w", err)
		}
		created = append(created, p)
		_, werr := fh.Write(f.data)
		if cerr := fh.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return fmt.Errorf("gateway: write certs: %s: %w", p, werr)
		}
	}
	return nil
}

// issued is a certificate with its key, parsed and PEM-encoded.
type issued struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	keyPEM  []byte // PKCS #8
}

// newIssued makes a P-256 key and a certificate for it from tmpl, signed
// by issuer, or self-signed when issuer is nil.
func newIssued(issuer *issued, tmpl *x509.Certificate) (*issued, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("gateway: generate key: %w", err)
	}
	tmpl.SerialNumber, err = rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("gateway: generate serial: %w", err)
	}
	parent, parentKey := tmpl, key
	if issuer != nil {
		parent, parentKey = issuer.cert, issuer.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		return nil, fmt.Errorf("gateway: create certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("gateway: parse certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("gateway: marshal key: %w", err)
	}
	return &issued{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}),
	}, nil
}

// validDNSName accepts names made of letters, digits, "-", "_" and ".",
// with an optional leading "*." wildcard label.
func validDNSName(h string) bool {
	h = strings.TrimPrefix(h, "*.")
	if h == "" || len(h) > 253 || strings.HasPrefix(h, ".") || strings.Contains(h, "..") {
		return false
	}
	for _, c := range h {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}

// LoadServerTLS reads dir/ca.crt, dir/server.crt and dir/server.key, as
// written by WriteCerts, and returns a server configuration for gRPC over
// TLS 1.2+ that requires every client to present a certificate signed by
// ca.crt (mutual TLS, as an OpenShell gateway in mtls mode). Errors name
// the missing or bad file.
func LoadServerTLS(dir string) (*tls.Config, error) {
	caFile := filepath.Join(dir, caCertFile)
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("gateway: load server TLS: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("gateway: load server TLS: %s: no PEM certificate", caFile)
	}
	certFile, keyFile := filepath.Join(dir, serverCertFile), filepath.Join(dir, serverKeyFile)
	crt, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("gateway: load server TLS: %w", err)
	}
	key, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("gateway: load server TLS: %w", err)
	}
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return nil, fmt.Errorf("gateway: load server TLS: %s and %s: %w", certFile, keyFile, err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{pair},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2"},
	}, nil
}
