package jobspec

import (
	"fmt"
	"slices"
	"strings"
)

// The job's enumerations. Each is a typed string whose values are the words a job spec,
// a CLI flag and a plan's JSON use, defined here once: the balancer, the training engine,
// the scheduler and the CLI use these types directly. Valid reports whether a value is
// known; Check(field) is the error a user sees, naming the field ("parallel.codec",
// "--codec"); ParseX converts a user's string.

// Schedule is a pipeline schedule: the order in which a stage runs the forward and
// backward passes of a step's micro-batches.
type Schedule string

// Pipeline schedules.
const (
	// Schedule1F1B (PipeDream-Flush) runs S−s−1 warm-up forwards on stage s of S, then
	// alternates one forward and one backward, then drains the remaining backwards: the
	// same bubble as GPipe with at most S−s micro-batches' activations held. The default.
	Schedule1F1B Schedule = "1f1b"
	// ScheduleGPipe runs every micro-batch forward, then every micro-batch backward: all
	// micro-batches are in flight on every stage.
	ScheduleGPipe Schedule = "gpipe"
)

// Schedules lists every schedule, the default first.
func Schedules() []Schedule { return []Schedule{Schedule1F1B, ScheduleGPipe} }

// Valid reports whether s is a known schedule.
func (s Schedule) Valid() bool { return slices.Contains(Schedules(), s) }

// Check returns nil for a known schedule, else an error naming field and the choices.
func (s Schedule) Check(field string) error { return check(field, s, Schedules()) }

// ParseSchedule converts s, as field holds it, to a Schedule.
func ParseSchedule(field, s string) (Schedule, error) { return parse(field, s, Schedules()) }

// Sync is how the replicas of the same layers agree.
type Sync string

// Sync methods.
const (
	// SyncDiLoCo runs inner_steps local steps, then all-reduces each layer's pseudo-gradient
	// (parameters at the last sync − now) and applies an outer Nesterov step. The default.
	SyncDiLoCo Sync = "diloco"
	// SyncEveryStep all-reduces gradients after every step: classic data parallelism, the
	// baseline.
	SyncEveryStep Sync = "sync"
	// SyncStreaming is Streaming DiLoCo: DiLoCo's outer step per fragment of layers
	// (parallel.fragments), staggered over the outer period and overlapped with the next
	// inner steps (parallel.overlap_steps), so each sync event carries about 1/fragments
	// of the model.
	SyncStreaming Sync = "streaming"
)

// Syncs lists every sync method, the default first.
func Syncs() []Sync { return []Sync{SyncDiLoCo, SyncEveryStep, SyncStreaming} }

// Valid reports whether s is a known sync method.
func (s Sync) Valid() bool { return slices.Contains(Syncs(), s) }

// Check returns nil for a known sync method, else an error naming field and the choices.
func (s Sync) Check(field string) error { return check(field, s, Syncs()) }

// ParseSync converts s, as field holds it, to a Sync.
func ParseSync(field, s string) (Sync, error) { return parse(field, s, Syncs()) }

// Codec compresses what replicas exchange (with error feedback).
type Codec string

// Codecs of replica traffic.
const (
	// CodecNone sends float32 values as they are.
	CodecNone Codec = "none"
	// CodecFP16 sends IEEE half-precision values: 2× smaller.
	CodecFP16 Codec = "fp16"
	// CodecInt8 sends int8 values with one float32 scale per block: about 4× smaller.
	CodecInt8 Codec = "int8"
	// CodecTopK sends the largest-magnitude share of the values with their indices.
	CodecTopK Codec = "topk"
)

// Codecs lists every codec.
func Codecs() []Codec { return []Codec{CodecNone, CodecFP16, CodecInt8, CodecTopK} }

// Valid reports whether c is a known codec.
func (c Codec) Valid() bool { return slices.Contains(Codecs(), c) }

// Check returns nil for a known codec, else an error naming field and the choices.
func (c Codec) Check(field string) error { return check(field, c, Codecs()) }

// ParseCodec converts s, as field holds it, to a Codec.
func ParseCodec(field, s string) (Codec, error) { return parse(field, s, Codecs()) }

// Strategy names a planning algorithm of the balancer.
type Strategy string

// Planning strategies.
const (
	// StrategyAuto is meshnode's planner: replicas, node order, link-aware stage sizes and
	// micro-batch count. The default.
	StrategyAuto Strategy = "auto"
	// StrategySky balances layer compute against measured speed under memory limits and
	// ignores links, as the Sky Computing paper does.
	StrategySky Strategy = "sky"
	// StrategyEven gives every node the same number of layers (the Sky Computing baseline).
	StrategyEven Strategy = "even"
	// StrategyOptimal searches every node order, node subset, partition and micro-batch
	// count of one pipeline. It refuses large instances, so it serves `meshnode plan`'s
	// comparisons; a job spec cannot name it (JobStrategies).
	StrategyOptimal Strategy = "optimal"
)

// Strategies lists every strategy the balancer knows.
func Strategies() []Strategy {
	return []Strategy{StrategyAuto, StrategySky, StrategyEven, StrategyOptimal}
}

// JobStrategies lists the strategies a job spec may name, the default first.
func JobStrategies() []Strategy { return []Strategy{StrategyAuto, StrategySky, StrategyEven} }

// Valid reports whether s is a strategy the balancer knows.
func (s Strategy) Valid() bool { return slices.Contains(Strategies(), s) }

// Check returns nil for a strategy the balancer knows, else an error naming field and the
// choices.
func (s Strategy) Check(field string) error { return check(field, s, Strategies()) }

// ParseStrategy converts s, as field holds it, to a Strategy the balancer knows.
func ParseStrategy(field, s string) (Strategy, error) { return parse(field, s, Strategies()) }

// check is the one message of every enumeration: "parallel.codec: must be one of none,
// fp16, int8, topk, got \"zip\"".
func check[T ~string](field string, got T, allowed []T) error {
	if slices.Contains(allowed, got) {
		return nil
	}
	words := make([]string, len(allowed))
	for i, a := range allowed {
		words[i] = string(a)
	}
	return fmt.Errorf("%s: must be one of %s, got %q", field, strings.Join(words, ", "), got)
}

func parse[T ~string](field, s string, allowed []T) (T, error) {
	if err := check(field, T(s), allowed); err != nil {
		return "", err
	}
	return T(s), nil
}

// Aggregate is how a replica combines the replicas' contributions to a synchronisation.
// Before any rule, a contribution that is not finite, or whose norm exceeds
// parallel.MaxNormRatio times the replica's own, is dropped and reported.
type Aggregate string

// Aggregation rules.
const (
	// AggregateMean is the mean of the contributions left: the default, and bit for bit
	// the plain mean when every replica is honest.
	AggregateMean Aggregate = "mean"
	// AggregateTrimmed is the coordinate-wise trimmed mean: per coordinate, the largest and
	// smallest quarter of the values (at least one each, with three or more) are left out.
	AggregateTrimmed Aggregate = "trimmed"
	// AggregateMedian is the coordinate-wise median.
	AggregateMedian Aggregate = "median"
	// AggregateCenteredClip is CenteredClip (Karimireddy et al. 2021, as Hivemind runs
	// it): from the coordinate-wise median, a few steps towards the mean of the
	// contributions clipped to a radius around the centre (the lower median of their
	// distances to it), which bounds what any one contribution inside the norm bound moves.
	AggregateCenteredClip Aggregate = "centered_clip"
)

// Aggregates lists every rule, the default first.
func Aggregates() []Aggregate {
	return []Aggregate{AggregateMean, AggregateTrimmed, AggregateMedian, AggregateCenteredClip}
}

// Valid reports whether a is a known rule.
func (a Aggregate) Valid() bool { return slices.Contains(Aggregates(), a) }

// Check returns nil for a known rule, else an error naming field and the choices.
func (a Aggregate) Check(field string) error { return check(field, a, Aggregates()) }

// ParseAggregate converts s, as field holds it, to an Aggregate.
func ParseAggregate(field, s string) (Aggregate, error) { return parse(field, s, Aggregates()) }

// Score says whether replicas score each other's contributions on a held-out batch before
// aggregating (parallel/score.go): a contribution that does not lower the held-out loss
// is dropped, which bounds colluding members that every rule on the contributions alone
// lets through (two of four).
type Score string

// Held-out scoring settings.
const (
	// ScoreAuto (the default) scores the outer steps of DiLoCo and streaming DiLoCo, where
	// it costs a few forward passes once per inner_steps steps, and under every-step sync and ZeRO, where
	// it would cost them at every step, only a collective that looks inconsistent: its
	// norm check contested (two against two, 16× apart), its norms over 8× apart, or its
	// contributions pulling against one another (never in the first steps of an honest
	// run; about one step in ten near convergence with small batches).
	ScoreAuto Score = "auto"
	// ScoreOn scores every synchronisation, every-step sync and ZeRO included.
	ScoreOn Score = "on"
	// ScoreOff never scores: the norm and distance checks and the rule alone.
	ScoreOff Score = "off"
)

// Scores lists every setting, the default first.
func Scores() []Score { return []Score{ScoreAuto, ScoreOn, ScoreOff} }

// Check returns nil for a known setting, else an error naming field and the choices.
func (s Score) Check(field string) error { return check(field, s, Scores()) }

// ParseScore converts s, as field holds it, to a Score.
func ParseScore(field, s string) (Score, error) { return parse(field, s, Scores()) }

// Enabled says whether a job of sync mode (zero: its ZeRO stage) scores contributions
// under s ("" is auto).
func (s Score) Enabled(sync Sync, zero int) bool {
	switch s {
	case ScoreOn:
		return true
	case ScoreOff:
		return false
	}
	return zero == 0 && (sync == SyncDiLoCo || sync == SyncStreaming)
}
