package tokenizer

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// ReadCorpus reads text files and directories for Train: a file is one document; a
// directory gives every regular file beneath it (symlinks and names starting with a dot
// skipped), in bytewise order of their slash paths. maxBytes bounds the total (0: no
// bound), so that a mistaken path does not fill memory.
func ReadCorpus(paths []string, maxBytes int64) ([][]byte, error) {
	var docs [][]byte
	var total int64
	read := func(path string) error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		total += int64(len(b))
		if maxBytes > 0 && total > maxBytes {
			return fmt.Errorf("%s: the corpus passes %d bytes", path, maxBytes)
		}
		docs = append(docs, b)
		return nil
	}
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			if err := read(p); err != nil {
				return nil, err
			}
			continue
		}
		var files []string
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if path != p && len(d.Name()) > 0 && d.Name()[0] == '.' {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if d.Type().IsRegular() {
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		sort.Slice(files, func(i, j int) bool { return filepath.ToSlash(files[i]) < filepath.ToSlash(files[j]) })
		for _, f := range files {
			if err := read(f); err != nil {
				return nil, err
			}
		}
	}
	return docs, nil
}
