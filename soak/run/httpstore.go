package run

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// The resource is served to client processes over HTTP on loopback: the
// coordinator applies and records every read and write, so an operation of a
// client killed before it heard the answer is still in the history.

type storeReply struct {
	Value int64 `json:"value"`
	OK    bool  `json:"ok"`
}

// serveResource serves res on a free loopback port until ctx ends; it returns
// the base URL and a function that waits for the server to stop.
func serveResource(ctx context.Context, res *Resource) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/op", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		client, err1 := strconv.Atoi(q.Get("client"))
		hold, err2 := strconv.Atoi(q.Get("hold"))
		token, err3 := strconv.ParseUint(q.Get("token"), 10, 64)
		call, err4 := strconv.ParseInt(q.Get("call"), 10, 64)
		read, err5 := strconv.ParseInt(q.Get("read"), 10, 64)
		deadline, err6 := strconv.ParseInt(q.Get("deadline"), 10, 64)
		for _, err := range []error{err1, err2, err3, err4, err5, err6} {
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
		}
		var rep storeReply
		switch q.Get("kind") {
		case "read":
			rep.Value, rep.OK = res.Read(client, hold, q.Get("key"), token, call, deadline)
		case "write":
			rep.OK = res.Write(client, hold, q.Get("key"), token, read, call, deadline)
		default:
			http.Error(w, "kind must be read or write", http.StatusBadRequest)
			return
		}
		_ = json.NewEncoder(w).Encode(rep)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	return "http://" + ln.Addr().String(), func() { <-done }, nil
}

// httpStore is a client process's Store: the coordinator's resource.
type httpStore struct {
	base string
	c    *http.Client
}

func (s httpStore) op(ctx context.Context, kind string, client, hold int, key string, token uint64, read, call, deadline int64) (storeReply, error) {
	q := url.Values{"kind": {kind}, "client": {strconv.Itoa(client)}, "hold": {strconv.Itoa(hold)}, "key": {key},
		"token": {strconv.FormatUint(token, 10)}, "read": {strconv.FormatInt(read, 10)}, "call": {strconv.FormatInt(call, 10)},
		"deadline": {strconv.FormatInt(deadline, 10)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/op?"+q.Encode(), nil)
	if err != nil {
		return storeReply{}, err
	}
	resp, err := s.c.Do(req)
	if err != nil {
		return storeReply{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return storeReply{}, fmt.Errorf("resource: %s", resp.Status)
	}
	var rep storeReply
	err = json.NewDecoder(resp.Body).Decode(&rep)
	return rep, err
}

func (s httpStore) Read(ctx context.Context, client, hold int, key string, token uint64, call, deadline int64) (int64, bool, error) {
	rep, err := s.op(ctx, "read", client, hold, key, token, 0, call, deadline)
	return rep.Value, rep.OK, err
}

func (s httpStore) Write(ctx context.Context, client, hold int, key string, token uint64, read, call, deadline int64) (bool, error) {
	rep, err := s.op(ctx, "write", client, hold, key, token, read, call, deadline)
	return rep.OK, err
}
