package container

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"
)

// ImportImage makes the image ref from one static binary, the way `docker import` does: a root
// filesystem holding the binary at /<its base name> and an empty /tmp, with entrypoint as the
// image's ENTRYPOINT, and changes (Dockerfile instructions `docker import --change` takes: ENV,
// LABEL, CMD, EXPOSE, WORKDIR, USER) applied after it. Nothing can be pulled on these machines, so this is how every image the lab
// and the tests run gets onto an engine. It returns the new image's id.
func (e *Engine) ImportImage(ctx context.Context, ref, binaryPath string, entrypoint []string, changes ...string) (string, error) {
	f, err := os.Open(binaryPath)
	if err != nil {
		return "", fmt.Errorf("import image %s: %w", ref, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("import image %s: %w", ref, err)
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("import image %s: %s is not a regular file", ref, binaryPath)
	}
	ep, err := json.Marshal(entrypoint)
	if err != nil {
		return "", fmt.Errorf("import image %s: entrypoint: %w", ref, err)
	}

	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeRootfs(pw, f, filepath.Base(binaryPath), st.Size())) }()
	defer pr.Close()

	body, err := e.cli.ImageImport(ctx, image.ImportSource{Source: pr, SourceName: "-"}, ref,
		image.ImportOptions{Changes: append([]string{"ENTRYPOINT " + string(ep)}, changes...)})
	if err != nil {
		return "", e.wrap(fmt.Sprintf("import image %s from %s", ref, binaryPath), err)
	}
	defer body.Close()
	if err := readProgress(body); err != nil {
		return "", e.wrap(fmt.Sprintf("import image %s from %s", ref, binaryPath), err)
	}
	id, err := e.ImageID(ctx, ref)
	if err != nil {
		return "", fmt.Errorf("import image %s: imported, but: %w", ref, err)
	}
	e.log.Info("container: image imported", "image", ref, "id", shortID(id), "binary", binaryPath)
	return id, nil
}

func writeRootfs(w io.Writer, bin io.Reader, name string, size int64) error {
	tw := tar.NewWriter(w)
	now := time.Now()
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777, ModTime: now}); err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o755, Size: size, ModTime: now}); err != nil {
		return err
	}
	if _, err := io.CopyN(tw, bin, size); err != nil {
		return fmt.Errorf("copy %s into the image: %w", name, err)
	}
	return tw.Close()
}

// readProgress drains the engine's JSON progress stream and returns the error it reports, if any.
func readProgress(r io.Reader) error {
	dec := json.NewDecoder(r)
	for {
		var m struct {
			Error       string `json:"error"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("reading the engine's answer: %w", err)
		}
		if m.ErrorDetail != nil && m.ErrorDetail.Message != "" {
			return errors.New(m.ErrorDetail.Message)
		}
		if m.Error != "" {
			return errors.New(m.Error)
		}
	}
}

// RemoveImage removes the image ref (untagging it, and deleting it when no other tag or container
// uses it). Removing an image that does not exist is not an error.
func (e *Engine) RemoveImage(ctx context.Context, ref string) error {
	_, err := e.cli.ImageRemove(ctx, ref, image.RemoveOptions{PruneChildren: true})
	if err == nil || cerrdefs.IsNotFound(err) {
		return nil
	}
	return e.wrap("remove image "+ref, err)
}
