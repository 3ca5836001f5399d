package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/records"
)

// ParseLocalData turns --local-data NAME=PATH values into Config.LocalData; each error
// names the value and what is wrong with it.
func ParseLocalData(values []string) (map[string]string, error) {
	if len(values) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, v := range values {
		name, path, ok := strings.Cut(v, "=")
		if !ok || name == "" || path == "" {
			return nil, fmt.Errorf("--local-data %q: want NAME=PATH", v)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("--local-data %q: the name %s is given twice", v, name)
		}
		out[name] = path
	}
	return out, nil
}

// validateLocalData checks Config.LocalData: at most records.MaxProfileLocalData names,
// each a data.local name, each path absolute and a dataset (localDatasetKind).
func validateLocalData(m map[string]string) error {
	if len(m) > records.MaxProfileLocalData {
		return fmt.Errorf("--local-data: %d datasets, at most %d", len(m), records.MaxProfileLocalData)
	}
	for _, name := range localDataNames(m) {
		path := m[name]
		if !jobspec.LocalDataNamePattern.MatchString(name) {
			return fmt.Errorf("--local-data %s=%s: the name must be 1-64 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit", name, path)
		}
		if !filepath.IsAbs(path) {
			return fmt.Errorf("--local-data %s=%s: the path must be absolute", name, path)
		}
		if _, err := localDatasetKind(path); err != nil {
			return fmt.Errorf("--local-data %s=%s: %w", name, path, err)
		}
	}
	return nil
}

// localDataNames is the sorted names of m, what the profile announces.
func localDataNames(m map[string]string) []string {
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Kinds of local dataset.
const (
	localSharded = "sharded corpus"
	localBinPair = "train.bin/val.bin pair"
	localText    = "text file"
)

// localDatasetKind says what path holds: a sharded corpus directory (manifest.json), a
// directory with train.bin and val.bin, or a regular file of text; anything else is an
// error saying what was found.
func localDatasetKind(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	switch {
	case st.IsDir() && model.IsShardedCorpus(path):
		return localSharded, nil
	case st.IsDir():
		for _, f := range []string{"train.bin", "val.bin"} {
			if fst, err := os.Stat(filepath.Join(path, f)); err != nil || !fst.Mode().IsRegular() {
				return "", fmt.Errorf("a directory without %s (want a sharded corpus with %s, or train.bin and val.bin)", f, model.ShardManifestFile)
			}
		}
		return localBinPair, nil
	case st.Mode().IsRegular():
		return localText, nil
	}
	return "", fmt.Errorf("not a regular file or directory (%s)", fileKind(st.Mode()))
}

// localDatasets opens the local datasets the operator exposed, once per name and
// vocabulary, for the jobs with data.local that this node trains.
type localDatasets struct {
	paths map[string]string

	mu     sync.Mutex
	loaded map[string]*model.Dataset // name|vocab → dataset
}

// load opens the dataset exposed as name, its ids checked against vocab. An unknown name
// is a model.ErrBadData naming data.local and the names this node exposes.
func (l *localDatasets) load(_ context.Context, name string, vocab int) (*model.Dataset, error) {
	path, ok := l.paths[name]
	if !ok {
		return nil, badData("data.local: this node exposes no local dataset %q (it exposes [%s])", name, strings.Join(localDataNames(l.paths), ", "))
	}
	key := fmt.Sprintf("%s|%d", name, vocab)
	l.mu.Lock()
	defer l.mu.Unlock()
	if ds := l.loaded[key]; ds != nil {
		return ds, nil
	}
	ds, err := openLocalDataset(path, vocab)
	if err != nil {
		return nil, fmt.Errorf("data.local %s: %w", name, err)
	}
	if l.loaded == nil {
		l.loaded = map[string]*model.Dataset{}
	}
	l.loaded[key] = ds
	return ds, nil
}

// openLocalDataset opens path by its kind: shards and .bin pairs are streamed from the
// files, a text file is read as bytes (95/5 split, model.LoadDataset).
func openLocalDataset(path string, vocab int) (*model.Dataset, error) {
	kind, err := localDatasetKind(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", model.ErrBadData, path, err)
	}
	var ds *model.Dataset
	if kind == localSharded {
		ds, err = model.LoadShards(path)
	} else {
		ds, err = model.LoadDataset(path, vocab)
	}
	if err != nil {
		return nil, err
	}
	if ds.Vocab > vocab {
		return nil, fmt.Errorf("%w: %s holds a vocabulary of %d, model.vocab is %d", model.ErrBadData, path, ds.Vocab, vocab)
	}
	return ds, nil
}

// LocalDataNames is the names of the local datasets this node exposes, sorted.
func (n *Node) LocalDataNames() []string { return localDataNames(n.cfg.LocalData) }
