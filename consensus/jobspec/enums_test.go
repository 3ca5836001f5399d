package jobspec

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// parsesToItself checks that every listed value is valid and parses to itself.
func parsesToItself[T ~string](t *testing.T, values []T, parse func(field, s string) (T, error), valid func(T) bool) {
	t.Helper()
	for _, v := range values {
		if got, err := parse("field", string(v)); err != nil || got != v || !valid(v) {
			t.Errorf("%T %q: parsed %q, %v", v, v, got, err)
		}
	}
}

// Every listed value is valid and parses to itself; anything else is refused with an error
// naming the field and the choices.
func TestEnumsValidateAndParse(t *testing.T) {
	parsesToItself(t, Schedules(), ParseSchedule, Schedule.Valid)
	parsesToItself(t, Syncs(), ParseSync, Sync.Valid)
	parsesToItself(t, Codecs(), ParseCodec, Codec.Valid)
	parsesToItself(t, Strategies(), ParseStrategy, Strategy.Valid)
	bad := []struct {
		err  error
		want string
	}{
		{Schedule("zb").Check("parallel.schedule"), `parallel.schedule: must be one of 1f1b, gpipe, got "zb"`},
		{Sync("").Check("--sync"), `--sync: must be one of diloco, sync, streaming, got ""`},
		{Codec("int4").Check("codec"), `codec: must be one of none, fp16, int8, topk, got "int4"`},
		{Strategy("greedy").Check("strategy"), `strategy: must be one of auto, sky, even, optimal, got "greedy"`},
	}
	for _, b := range bad {
		if b.err == nil || b.err.Error() != b.want {
			t.Errorf("got %v, want %q", b.err, b.want)
		}
	}
	if _, err := ParseCodec("--codec", "INT8"); err == nil {
		t.Error("ParseCodec accepted INT8: the words are case-sensitive, as the spec's are")
	}
}

// The balancer knows the optimal strategy, but a job spec cannot name it: it refuses large
// instances, which a job may grow into.
func TestOptimalIsNotAJobStrategy(t *testing.T) {
	if !StrategyOptimal.Valid() {
		t.Fatal("optimal is a strategy of the balancer")
	}
	_, err := Parse([]byte("placement: {strategy: optimal}"))
	if err == nil || !strings.Contains(err.Error(), `placement.strategy: must be one of auto, sky, even, got "optimal"`) {
		t.Fatalf("Parse = %v, want optimal refused", err)
	}
}

// storedJob is the JSON of a spec as the control plane stored it before the enumerations
// were typed; it must decode to the same spec and encode back byte for byte.
const storedJob = `{"name":"job","model":{"layers":4,"d_model":128,"heads":4,"context":128,"vocab":256},` +
	`"data":{"source":"builtin:gostd"},` +
	`"train":{"steps":300,"batch":16,"micro_batches":4,"lr":0.002,"warmup":30,"seed":1,"eval_every":100},` +
	`"parallel":{"replicas":"auto","stages":"auto","schedule":"1f1b","sync":"diloco","inner_steps":50,` +
	`"outer_lr":0.7,"outer_momentum":0.9,"codec":"int8"},` +
	`"placement":{"strategy":"auto","min_nodes":1,"max_nodes":0},"checkpoint":{"every":100,"keep":3}}`

func TestStoredJobWireFormatUnchanged(t *testing.T) {
	var s Spec
	if err := json.Unmarshal([]byte(storedJob), &s); err != nil {
		t.Fatal(err)
	}
	// The default spec of that time: micro-batches pinned at 4, no memory settings (the
	// planner then plans without recomputation, as it did), no streaming fields (only
	// sync: streaming reads them).
	want := DefaultSpec()
	want.Train.MicroBatches, want.Memory = Fixed(4), Memory{}
	want.Parallel.Fragments, want.Parallel.OverlapSteps, want.Parallel.Aggregate, want.Parallel.Score = 0, 0, "", ""
	// The outer step of that time: pinned at 0.7/0.9 ("auto" is the default since).
	want.Parallel.OuterLR, want.Parallel.OuterMomentum = Pinned(0.7), Pinned(0.9)
	// No audit: "auto" is the default since.
	want.Parallel.Audit = Pinned(0)
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("decoded %+v, want %+v", s, want)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != storedJob {
		t.Fatalf("encoded\n%s\nwant\n%s", b, storedJob)
	}
}

// TestLocalEvalMessageRoundTrip: the dataset and loss a local evaluation's message carries
// are read back exactly as written; other messages are not taken for one.
func TestLocalEvalMessageRoundTrip(t *testing.T) {
	msg := LocalEvalMessage("clinic-a", 12000, 600, 4.25)
	name, loss, ok := LocalEvalOf(msg)
	if !ok || name != "clinic-a" || loss != 4.25 {
		t.Fatalf("%q read back as %q %v %v", msg, name, loss, ok)
	}
	for _, m := range []string{"", "offender x: y", "local data : val loss 1", "local data a: val loss x"} {
		if _, _, ok := LocalEvalOf(m); ok {
			t.Errorf("%q taken for a local evaluation", m)
		}
	}
}
