package driver

import (
	"errors"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"
)

func params(t *testing.T, query string) *Params {
	t.Helper()
	q, err := url.ParseQuery(query)
	if err != nil {
		t.Fatal(err)
	}
	return NewParams("testdriver", q)
}

func TestParamsReadTypedValuesAndDefaults(t *testing.T) {
	p := params(t, "d=3s&n=7&b=true&l=a,b")
	if got := p.Duration("d", time.Second, time.Millisecond, time.Hour, "a duration"); got != 3*time.Second {
		t.Errorf("Duration = %v, want 3s", got)
	}
	if got := p.Duration("absent", time.Second, 0, time.Hour, "a duration"); got != time.Second {
		t.Errorf("Duration of an absent parameter = %v, want the default 1s", got)
	}
	if got := p.Int("n", 1, 1, 10, "an integer"); got != 7 {
		t.Errorf("Int = %d, want 7", got)
	}
	if got := p.Bool("b", false); !got {
		t.Error("Bool = false, want true")
	}
	if got := p.List("l", nil); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("List = %q, want [a b]", got)
	}
	if got := p.String("s", "def"); got != "def" {
		t.Errorf("String of an absent parameter = %q, want the default", got)
	}
	if err := p.Check(); err != nil {
		t.Errorf("Check = %v, want nil", err)
	}
}

func TestParamsBadValueIsInvalidURLNamingParameterAndExample(t *testing.T) {
	for query, read := range map[string]func(*Params){
		"d=ten":  func(p *Params) { p.Duration("d", 0, 0, time.Hour, "a duration such as 5s") },
		"d=2h":   func(p *Params) { p.Duration("d", 0, 0, time.Hour, "a duration such as 5s") },
		"d=":     func(p *Params) { p.Duration("d", 0, 0, time.Hour, "a duration such as 5s") },
		"n=0":    func(p *Params) { p.Int("n", 1, 1, 10, "an integer such as 5s") },
		"n=x":    func(p *Params) { p.Int("n", 1, 1, 10, "an integer such as 5s") },
		"b=yes!": func(p *Params) { p.Bool("b", false) },
		"l=a,,b": func(p *Params) { p.List("l", nil) },
	} {
		p := params(t, query)
		read(p)
		err := p.Check()
		if !errors.Is(err, ErrInvalidURL) {
			t.Errorf("%s: Check = %v, want ErrInvalidURL", query, err)
			continue
		}
		name := query[:1]
		if !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "testdriver") {
			t.Errorf("%s: %v does not name the driver and the parameter", query, err)
		}
		if name != "b" && !strings.Contains(err.Error(), "such as") {
			t.Errorf("%s: %v gives no example", query, err)
		}
		if name == "b" && !strings.Contains(err.Error(), "true or false") {
			t.Errorf("%s: %v does not say what is wanted", query, err)
		}
	}
}

func TestParamsKeepTheFirstError(t *testing.T) {
	p := params(t, "a=x&b=y")
	p.Int("a", 0, 0, 1, "an integer")
	p.Int("b", 0, 0, 1, "an integer")
	if err := p.Check(); err == nil || !strings.Contains(err.Error(), "a=") || strings.Contains(err.Error(), "b=") {
		t.Errorf("Check = %v, want the error of a alone", err)
	}
}

func TestParamsUnknownAreRejectedWithTheAcceptedList(t *testing.T) {
	p := params(t, "zeta=1&alpha=2&known=3&passthrough=4")
	p.String("known", "")
	p.Accept("passthrough")
	p.Has("other")
	err := p.Check()
	if !errors.Is(err, ErrInvalidURL) {
		t.Fatalf("Check = %v, want ErrInvalidURL", err)
	}
	want := "unknown parameter alpha, zeta; accepted: known, passthrough, other (and the portable ttl, auto_refresh, prefix, open_timeout, close_timeout)"
	if !strings.Contains(err.Error(), want) {
		t.Errorf("Check = %v, want it to say %q", err, want)
	}
}

func TestParamsSecretValuesNeverInErrors(t *testing.T) {
	p := params(t, "token=hunter2")
	p.Secret("token")
	p.Int("token", 0, 0, 1, "an integer")
	err := p.Check()
	if !errors.Is(err, ErrInvalidURL) || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "token") {
		t.Errorf("Check = %v, want ErrInvalidURL naming token without its value", err)
	}
}

func TestParamsUniqueAndNonEmpty(t *testing.T) {
	p := params(t, "a=1&a=2")
	if got := p.String("a", ""); got != "1" || p.Check() != nil {
		t.Errorf("without Unique: %q, %v; want the first value and no error", got, p.Check())
	}
	p = params(t, "a=1&a=2")
	p.Unique = true
	p.String("a", "")
	if err := p.Check(); !errors.Is(err, ErrInvalidURL) || !strings.Contains(err.Error(), "a given 2 times") {
		t.Errorf("Unique: Check = %v, want a repeated-parameter error", err)
	}
	p = params(t, "a=")
	p.NonEmpty = true
	p.String("a", "")
	if err := p.Check(); !errors.Is(err, ErrInvalidURL) || !strings.Contains(err.Error(), "a is empty") {
		t.Errorf("NonEmpty: Check = %v, want an empty-parameter error", err)
	}
}

func TestParamsAllReadsEveryValueOfARepeatedParameter(t *testing.T) {
	p := params(t, "server=a&server=b")
	p.Unique = true // applies to single-valued getters only
	if got := p.All("server"); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("All = %q, want [a b]", got)
	}
	if got := p.All("absent"); got != nil {
		t.Errorf("All of an absent parameter = %q, want nil", got)
	}
	if err := p.Check(); err != nil {
		t.Errorf("Check = %v, want nil", err)
	}
	p = params(t, "server=a&server=")
	p.NonEmpty = true
	p.All("server")
	if err := p.Check(); !errors.Is(err, ErrInvalidURL) || !strings.Contains(err.Error(), "server is empty") {
		t.Errorf("NonEmpty: Check = %v, want an empty-parameter error", err)
	}
}

func TestParamsRefusedParameterIsRejectedWithTheReasonOnlyWhenGiven(t *testing.T) {
	p := params(t, "cacert=/ca.pem")
	p.Refuse("cacert", "needs TLS: use etcds://")
	p.Refuse("absent", "is never allowed")
	err := p.Check()
	if !errors.Is(err, ErrInvalidURL) || !strings.Contains(err.Error(), "parameter cacert needs TLS: use etcds://") {
		t.Errorf("Check = %v, want ErrInvalidURL with the reason", err)
	}
	if strings.Contains(err.Error(), "absent") {
		t.Errorf("Check = %v, mentions a refused parameter the URL does not give", err)
	}
}

func TestParamsErrAndRestHandTheUnreadParametersOn(t *testing.T) {
	p := params(t, "fencing=false&sslmode=disable&application_name=x")
	if p.Bool("fencing", true) {
		t.Error("Bool = true, want false")
	}
	if err := p.Err(); err != nil {
		t.Errorf("Err = %v, want nil: unread parameters are not its business", err)
	}
	want := url.Values{"sslmode": {"disable"}, "application_name": {"x"}}
	if got := p.Rest(); !reflect.DeepEqual(got, want) {
		t.Errorf("Rest = %v, want %v", got, want)
	}
	p = params(t, "n=zero&other=1")
	p.Int("n", 1, 1, 10, "a positive integer")
	if err := p.Err(); !errors.Is(err, ErrInvalidURL) || !strings.Contains(err.Error(), `n="zero"`) {
		t.Errorf("Err = %v, want the bad value's error", err)
	}
}

func TestParamsWithoutDriverParametersListOnlyThePortableOnes(t *testing.T) {
	p := params(t, "colour=blue")
	if err := p.Check(); err == nil || !strings.Contains(err.Error(), "unknown parameter colour; accepted: only the portable ttl, auto_refresh, prefix, open_timeout, close_timeout") {
		t.Errorf("Check = %v, want the portable parameters alone as the accepted list", err)
	}
}
