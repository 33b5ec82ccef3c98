package main

import (
	"net/url"

	"github.com/distlock/lock/pgadvisory"
)

// recordingParams are, by URL scheme, the URL parameters that make a backend
// record what each holder publishes (owner name, token, start time, a
// leader's value). Without them such a backend reports a holder it cannot
// describe with zero values, which distlock prints as unknown. The portable
// API gives the zero values but not the reason, so the reason for the
// backends of this repository is kept here, beside the drivers distlock
// imports.
var recordingParams = map[string][2]string{
	pgadvisory.Scheme:      {"holders", "true"},
	pgadvisory.SchemeAlias: {"holders", "true"},
}

// unknownReason says why a field the backend at rawURL left zero is unknown:
// the URL parameter that would make it known, else that the holder did not
// record it.
func unknownReason(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "not recorded on this backend"
	}
	p, ok := recordingParams[u.Scheme]
	switch {
	case !ok:
		return "not recorded on this backend"
	case u.Query().Get(p[0]) != p[1]:
		return "needs " + p[0] + "=" + p[1]
	default:
		// The inspecting URL records, but the holder did not: a client
		// without the parameter, or not distlock at all.
		return "its holder did not record it (" + p[0] + "=" + p[1] + " on the holder's URL)"
	}
}

// unknownText is how distlock prints a field it cannot know.
func unknownText(rawURL string) string {
	return "unknown (" + unknownReason(rawURL) + ")"
}
