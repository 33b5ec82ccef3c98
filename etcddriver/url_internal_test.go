package etcddriver

import (
	"errors"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/lock/driver"
)

func TestURLsMapToClientConfig(t *testing.T) {
	def := func(f func(*clientv3.ConfigSpec)) *clientv3.ConfigSpec {
		s := &clientv3.ConfigSpec{DialTimeout: DefaultDialTimeout, KeepAliveTime: DefaultKeepaliveTime, KeepAliveTimeout: DefaultKeepaliveTimeout}
		f(s)
		return s
	}
	for _, c := range []struct {
		url, portablePrefix string
		spec                *clientv3.ConfigSpec
		prefix              string
	}{
		{"etcd://h1", "", def(func(s *clientv3.ConfigSpec) { s.Endpoints = []string{"h1:2379"} }), ""},
		{"etcd://h1:2380,10.0.0.2,h3:1/app/", "", def(func(s *clientv3.ConfigSpec) {
			s.Endpoints = []string{"h1:2380", "10.0.0.2:2379", "h3:1"}
		}), "/app"},
		{"etcd://[::1]:2380/a/b", "", def(func(s *clientv3.ConfigSpec) { s.Endpoints = []string{"[::1]:2380"} }), "/a/b"},
		{"etcd://h", "app", def(func(s *clientv3.ConfigSpec) { s.Endpoints = []string{"h:2379"} }), "/app"},
		{"etcd://u:p%40ss@h/x", "", def(func(s *clientv3.ConfigSpec) {
			s.Endpoints = []string{"h:2379"}
			s.Auth = &clientv3.AuthConfig{Username: "u", Password: "p@ss"}
		}), "/x"},
		{"etcds://h/x", "", def(func(s *clientv3.ConfigSpec) {
			s.Endpoints = []string{"h:2379"}
			s.Secure = &clientv3.SecureConfig{}
		}), "/x"},
		{"etcds://h/x?cacert=/ca.pem&cert=/c.pem&key=/k.pem&server_name=etcd.local", "", def(func(s *clientv3.ConfigSpec) {
			s.Endpoints = []string{"h:2379"}
			s.Secure = &clientv3.SecureConfig{Cacert: "/ca.pem", Cert: "/c.pem", Key: "/k.pem", ServerName: "etcd.local"}
		}), "/x"},
		{"etcd://h?dial_timeout=1s&keepalive_time=30s&keepalive_timeout=2500ms", "", def(func(s *clientv3.ConfigSpec) {
			s.Endpoints = []string{"h:2379"}
			s.DialTimeout, s.KeepAliveTime, s.KeepAliveTimeout = time.Second, 30*time.Second, 2500*time.Millisecond
		}), ""},
	} {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		spec, prefix, err := parseURL(u, c.portablePrefix)
		if err != nil {
			t.Errorf("%s: %v", c.url, err)
			continue
		}
		if !reflect.DeepEqual(spec, c.spec) || prefix != c.prefix {
			t.Errorf("%s:\n got %+v prefix %q\nwant %+v prefix %q", c.url, spec, prefix, c.spec, c.prefix)
		}
	}
}

func TestBadURLsAreRejectedClearly(t *testing.T) {
	for _, c := range []struct{ url, portablePrefix, want string }{
		{"etcd://h/x?bogus=1&also=2", "", "unknown parameter also, bogus; accepted: cacert, cert, key, server_name, dial_timeout, keepalive_time, keepalive_timeout"},
		{"etcd://h/x?cacert=/ca.pem", "", "cacert needs TLS: use etcds://"},
		{"etcds://h/x?cert=/c.pem", "", "needs both cert and key"},
		{"etcd://h/x?dial_timeout=soon", "", `dial_timeout="soon" is not a positive duration`},
		{"etcd://h/x?keepalive_time=-1s", "", "keepalive_time"},
		{"etcd://h/x?dial_timeout=1s&dial_timeout=2s", "", "given 2 times"},
		{"etcds://h/x?cacert=", "", "cacert is empty"},
		{"etcd://h/x?cacert=", "", "cacert needs TLS"}, // both are wrong; either is a clear answer
		{"etcd:///x", "", "no host"},
		{"etcd://h1,,h2/x", "", "empty host"},
		{"etcd://h:/x", "", "empty port"},
		{"etcd://u@h/x", "", "user and password go together"},
		{"etcd://h/x", "y", "given twice"},
		{"etcd://h/x#frag", "", "fragment"},
		{"redis://h", "", "neither etcd nor etcds"},
	} {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = parseURL(u, c.portablePrefix)
		if !errors.Is(err, driver.ErrInvalidURL) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want ErrInvalidURL saying %q", c.url, err, c.want)
		}
	}
}
