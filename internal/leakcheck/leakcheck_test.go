package leakcheck

import (
	"strings"
	"testing"
	"time"
)

func TestFindReportsAGoroutineLeftRunning(t *testing.T) {
	stop := make(chan struct{})
	started := make(chan struct{})
	go func() { close(started); <-stop }()
	<-started
	err := Find(Wait(50 * time.Millisecond))
	close(stop)
	if err == nil || !strings.Contains(err.Error(), "TestFindReportsAGoroutineLeftRunning") {
		t.Fatalf("Find = %v; want the blocked goroutine reported with its stack", err)
	}
}

func TestFindWaitsForAGoroutineOnItsWayOut(t *testing.T) {
	stop := make(chan struct{})
	go func() { <-stop }()
	time.AfterFunc(20*time.Millisecond, func() { close(stop) })
	if err := Find(Wait(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
}

func TestIgnoreCurrentTakesRunningGoroutinesAsGiven(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	started := make(chan struct{})
	go func() { close(started); <-stop }()
	<-started
	if err := Find(IgnoreCurrent(), Wait(50*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
}

func TestParseReadsARecord(t *testing.T) {
	g, ok := parse("goroutine 42 [chan receive, 3 minutes]:\ntesting.(*T).Run(0xc000102340, {0x5f1e2c, 0x4}, 0x60b1d0)\n\t/usr/local/go/src/testing/testing.go:1751 +0x3ab")
	if !ok || g.id != 42 || g.state != "chan receive" || g.first != "testing.(*T).Run" || !g.standard() {
		t.Fatalf("parse = %+v, %v", g, ok)
	}
}

func TestMain(m *testing.M) { VerifyTestMain(m) }
