package ctrspec

import (
	"errors"
	"strings"
	"testing"
)

func TestParsePort(t *testing.T) {
	for in, want := range map[string]string{
		"8080:80":              "8080:80",
		"0.0.0.0:8080:80/tcp":  "8080:80",
		"127.0.0.1:53:53/UDP":  "127.0.0.1:53:53/udp",
		"[::1]:8080:80":        "[::1]:8080:80",
		"0:80":                 "0:80",
		"10.0.0.1:5000:5000/s": "",
		"80":                   "",
		"8080:0":               "",
		"70000:80":             "",
		"8000-8010:80":         "",
		"host:80:80":           "",
		"1:2:3:4":              "",
		"8080:80/icmp":         "",
	} {
		b, err := ParsePort(in)
		if want == "" {
			if err == nil {
				t.Errorf("ParsePort(%q) = %v, want an error", in, b)
			}
			continue
		}
		if err != nil || b.String() != want {
			t.Errorf("ParsePort(%q) = %q, %v; want %q", in, b, err, want)
		}
	}
}

func TestParseVolume(t *testing.T) {
	for in, want := range map[string]string{
		"/srv/data:/data":        "/srv/data:/data",
		"/srv/data/:/data/:rw":   "/srv/data:/data",
		"/srv/data:/data:ro":     "/srv/data:/data:ro",
		"/srv/data:/data:z,ro":   "/srv/data:/data:ro,z",
		"pgdata:/var/lib/pg":     "pgdata:/var/lib/pg",
		"relative/dir:/data":     "",
		"/srv:data":              "",
		"/srv":                   "",
		"/srv:/data:rx":          "",
		"/a:/b:ro:extra":         "",
		":/data":                 "",
		"/srv/data:/data:ro,rw":  "/srv/data:/data:ro",
		"/srv/data:/data:shared": "/srv/data:/data:shared",
	} {
		v, err := ParseVolume(in)
		if want == "" {
			if err == nil {
				t.Errorf("ParseVolume(%q) = %v, want an error", in, v)
			}
			continue
		}
		if err != nil || v.String() != want {
			t.Errorf("ParseVolume(%q) = %q, %v; want %q", in, v, err, want)
		}
	}
}

func TestValidateNamesTheField(t *testing.T) {
	s := Spec{
		Name:    "web",
		Image:   "",
		Env:     map[string]string{"A=B": "x"},
		Ports:   []string{"8080:80", "99999:80", "8080:80"},
		Volumes: []string{"/a:/b", "rel:/b:ro", "/a:b"},
		Restart: "sometimes",
		Labels:  map[string]string{"": "x"},
	}
	err := s.Validate()
	if err == nil {
		t.Fatal("Validate accepted a bad spec")
	}
	for _, field := range []string{"image", "env", "ports[1]", "ports[2]", "volumes[2]", "restart", "labels"} {
		found := false
		for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
			var fe *FieldError
			if errors.As(e, &fe) && fe.Field == field && fe.Container == "web" {
				found = true
			}
		}
		if !found {
			t.Errorf("no FieldError for %s in: %v", field, err)
		}
	}
	if !strings.Contains(err.Error(), `container web: ports[1] "99999:80"`) {
		t.Errorf("error does not name the container, field and value: %v", err)
	}
	if err := (Spec{Image: "x"}).Validate(); err == nil || !strings.Contains(err.Error(), "name") {
		t.Errorf("missing name: %v", err)
	}
	ok := Spec{Name: "web", Image: "ct-test/echo:1", Ports: []string{"127.0.0.1:8080:80"}, Volumes: []string{"/a:/b:ro"}, Restart: "on-failure:3"}
	if err := ok.Validate(); err != nil {
		t.Errorf("valid spec refused: %v", err)
	}
}
