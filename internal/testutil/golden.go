package testutil

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// CheckWireFormat pins the JSON encoding of v, a record that Raft stores or the API serves:
// v's indented JSON must equal testdata/name.json byte for byte, and the file, decoded into
// a value of v's type and encoded again, must give v's own encoding (no field of the file
// is lost on the way in). With update the file is rewritten first (after a deliberate,
// additive change). Every field of v down to the leaves must be set (AllFieldsSet, but for
// the paths in except), so that a new field is pinned as soon as it exists.
func CheckWireFormat(t testing.TB, name string, v any, update bool, except ...string) {
	t.Helper()
	AllFieldsSet(t, name, v, except...)
	got, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("testdata", name+".json")
	if update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s encodes differently from %s: the wire format changed.\ngot:\n%s", name, path, got)
	}
	back := reflect.New(reflect.TypeOf(v))
	if err := json.Unmarshal(want, back.Interface()); err != nil {
		t.Fatalf("decode %s: %v", path, err)
	}
	again, err := json.Marshal(back.Elem().Interface())
	if err != nil {
		t.Fatal(err)
	}
	direct, _ := json.Marshal(v)
	if !bytes.Equal(again, direct) {
		t.Fatalf("%s does not decode to the record it was written from:\n%s\n%s", path, again, direct)
	}
}

// AllFieldsSet fails t for every exported struct field reachable from v (through
// pointers, slices' first elements, arrays and maps' values) that holds its zero value,
// but for the fields whose path ends with one of except (alternatives that exclude each
// other, such as a corpus given by source or by train/val files). A type with its own
// JSON encoding is a leaf: it needs only to be non-zero.
func AllFieldsSet(t testing.TB, name string, v any, except ...string) {
	t.Helper()
	marshaler := reflect.TypeFor[json.Marshaler]()
	skip := func(path string) bool {
		for _, e := range except {
			if strings.HasSuffix(path, e) {
				return true
			}
		}
		return false
	}
	var walk func(path string, x reflect.Value)
	walk = func(path string, x reflect.Value) {
		if x.Type().Implements(marshaler) || reflect.PointerTo(x.Type()).Implements(marshaler) {
			return
		}
		switch x.Kind() {
		case reflect.Pointer, reflect.Interface:
			if !x.IsNil() {
				walk(path, x.Elem())
			}
		case reflect.Slice, reflect.Array:
			if x.Len() > 0 && x.Type().Elem().Kind() != reflect.Uint8 {
				walk(path+"[0]", x.Index(0))
			}
		case reflect.Map:
			for _, k := range x.MapKeys() {
				walk(path+"[…]", x.MapIndex(k))
				break
			}
		case reflect.Struct:
			for i := range x.NumField() {
				f := x.Type().Field(i)
				if !f.IsExported() || skip(path+"."+f.Name) {
					continue
				}
				if x.Field(i).IsZero() {
					t.Errorf("%s: field %s.%s is zero: set it so that the golden file pins it", name, path, f.Name)
					continue
				}
				walk(path+"."+f.Name, x.Field(i))
			}
		}
	}
	walk(name, reflect.ValueOf(v))
}
