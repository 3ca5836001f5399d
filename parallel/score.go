package parallel

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/meshnode/meshnode/model"
)

// Held-out scoring (Gauntlet's loss before/after, Zeno's "stochastic descendant score",
// Xie, Koyejo and Gupta 2019): before aggregating, every member scores each contribution
// that passed the norm and distance checks by what it does to the loss of a held-out
// batch, s = L(θ) − L(θ − γ·c), from the point θ every honest member shares (the weights
// under every-step sync and ZeRO, the anchor under DiLoCo), and drops the contributions
// that do not lower it (s ≤ 0). A rule that sees only the contributions cannot tell two
// colluders of four from the two honest members; the held-out loss can, because an
// update that points against the data raises it however central it looks.
//
// Every honest member draws the same held-out batch (ScoreWindows training windows from a
// stream of the job's seed that no replica trains on at that step), loads the same
// weights into its own copy of the model and runs the same deterministic kernels, so all
// compute the same scores to the bit and drop the same contributions: they still end
// with the same bits (the result digests confirm it).

// ScoreWindows is how many held-out training windows a contribution is scored on.
const ScoreWindows = 8

// scoreSeedSalt turns the job's seed into the held-out stream's (SplitMix64), so that its
// windows are not the rows any replica trains on.
const scoreSeedSalt = 0x5c0e5c0e5c0e5c0e

// heldOutScorer scores contributions on a copy of the whole model (a replica of one
// stage): its own weights and workspace, so that scoring leaves the worker's training
// state alone. It is safe for concurrent use.
type heldOutScorer struct {
	mu        sync.Mutex
	layers    []model.Layer
	runParams [][]*model.Param // the copy's parameters of each of the worker's runs
	ws        model.Workspace
	sampler   model.Sampler
	evals     int // forward passes run (tests read it)
	// stageParams are the copy's parameters of each stage of a pipelined replica (nil
	// for the worker's own stage, and for a one-stage replica): the anchor exchange
	// loads the other stages' anchors into them (anchor_exchange.go), the stage weight
	// mirror their current weights (stage_mirror.go).
	stageParams [][]*model.Param
}

// newHeldOutScorer builds the scorer of a worker whose stage holds the whole model, its
// runs cut as runs: the model as the worker's stage is built (the seed's weights, then
// cfg.Init's, with cfg.LoRA's adapters), so that a LoRA run scores its adapters on its base.
func newHeldOutScorer(cfg TrainConfig, data *model.Dataset, runs []syncRun) (*heldOutScorer, error) {
	layers, err := stageLayers(cfg, 0, cfg.Model.NumLayers(), false)
	if err != nil {
		return nil, fmt.Errorf("held-out scorer: %w", err)
	}
	s := &heldOutScorer{layers: layers}
	for _, r := range runs {
		s.runParams = append(s.runParams, model.LayerParams(s.layers[r.first:r.last]))
	}
	s.sampler = model.Sampler{Train: data.Train, Batch: ScoreWindows, Context: cfg.Model.Context,
		Seed: model.SplitMix64(cfg.Seed, scoreSeedSalt)}
	return s, nil
}

// heldOutScore is what a contribution does to the held-out loss: gain, the mean over the
// held-out windows of the loss it removes (L(θ) − L(θ − γ·c) per window), and se, the
// standard error of that mean, from the windows' differences (paired: each window is
// scored before and after the step, so the windows' own difficulty cancels).
type heldOutScore struct{ gain, se float64 }

// ScoreNoise is how many standard errors a contribution's gain is given before it is
// judged under the floor (scoreRejections): an honest update near convergence removes
// about nothing from the held-out loss, and one batch of ScoreWindows windows then says
// "raises it by 0.01" about as often as "lowers it by 0.01" (DiLoCo, H = 5, validation
// loss 0.06: an honest update dropped in 9 of 60 outer steps). A contribution is dropped
// only when its gain is under the floor by more than ScoreNoise standard errors (3: at 2,
// one honest gradient of four in 300 every-step syncs near convergence was still dropped;
// every attack of the in-bound table lies far beyond 3).
const ScoreNoise = 3

// upper is the gain plus ScoreNoise standard errors: the most the windows say the
// contribution may remove.
func (h heldOutScore) upper() float64 { return h.gain + ScoreNoise*h.se }

// pairedGain is the held-out score of a step whose windows' losses are after, from the
// windows' losses before.
func pairedGain(before, after []float64) heldOutScore {
	n := float64(len(before))
	var sum float64
	d := make([]float64, len(before))
	for w, l := range before {
		d[w] = l - after[w]
		sum += d[w]
	}
	mean := sum / n
	if math.IsNaN(mean) || math.IsInf(mean, 0) || len(d) < 2 {
		return heldOutScore{gain: mean}
	}
	var ss float64
	for _, v := range d {
		ss += (v - mean) * (v - mean)
	}
	return heldOutScore{gain: mean, se: math.Sqrt(ss / (n - 1) / n)}
}

// scores returns, for each contribution of run (nil: already dropped, NaN), its held-out
// score over the probes: of the steps base with run's part moved by −γ·c for γ in
// probes(c), the one whose gain plus ScoreNoise standard errors is least. base holds every
// run's flat parameters at the shared point, others (nil: as loaded) the other stages' of
// a pipelined replica at that point; the batch is the held-out batch of step.
func (s *heldOutScorer) scores(step, run int, base, others [][]float32, all [][]float32, probes func([]float32) []float64) ([]heldOutScore, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	mb, err := s.load(step, base, others)
	if err != nil {
		return nil, err
	}
	l0 := s.windowLosses(mb)
	out := make([]heldOutScore, len(all))
	for m, c := range all {
		if c == nil {
			out[m] = heldOutScore{gain: math.NaN(), se: math.NaN()}
			continue
		}
		ls, err := s.movedLosses(mb, run, base[run], c, probes(c))
		if err != nil {
			return nil, err
		}
		for k, l := range ls {
			if sc := pairedGain(l0, l); k == 0 || !(sc.upper() >= out[m].upper()) {
				out[m] = sc
			}
		}
	}
	return out, nil
}

// losses returns the held-out loss of step's batch (the mean of its windows') with run's
// part of base moved by −γ·c, for each γ of gammas (others as in scores).
func (s *heldOutScorer) losses(step, run int, base, others [][]float32, c []float32, gammas []float64) ([]float64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	mb, err := s.load(step, base, others)
	if err != nil {
		return nil, err
	}
	ls, err := s.movedLosses(mb, run, base[run], c, gammas)
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(ls))
	for k, l := range ls {
		for _, v := range l {
			out[k] += v
		}
		out[k] /= float64(len(l))
	}
	return out, nil
}

// load loads base (every run's flat parameters) and others (each other stage's flat
// parameters, nil where the copy keeps what it holds) into the copy and draws step's
// held-out batch. others is how a streaming fragment's score reads the other stages'
// anchors of its launch while later launches' exchanges load theirs (launchAnchors).
func (s *heldOutScorer) load(step int, base, others [][]float32) (*model.Batch, error) {
	if len(base) != len(s.runParams) {
		return nil, fmt.Errorf("held-out score: %d runs of weights, the scorer has %d", len(base), len(s.runParams))
	}
	for p, v := range others {
		if v == nil {
			continue
		}
		if p >= len(s.stageParams) || s.stageParams[p] == nil {
			return nil, fmt.Errorf("held-out score: weights of stage %d, which the scorer lacks", p)
		}
		if err := loadFlat(s.stageParams[p], v); err != nil {
			return nil, fmt.Errorf("held-out score: stage %d: %w", p, err)
		}
	}
	for r, ps := range s.runParams {
		if err := loadFlat(ps, base[r]); err != nil {
			return nil, fmt.Errorf("held-out score: %w", err)
		}
	}
	mb, err := s.sampler.MicroBatch(step, 0, 1)
	if err != nil {
		return nil, fmt.Errorf("held-out score: %w", err)
	}
	mb.RowLoss = make([]float64, mb.Rows())
	return mb, nil
}

// movedLosses is each window's loss of mb with run's parameters at from − γ·c, for each γ
// of gammas (the other runs as loaded).
func (s *heldOutScorer) movedLosses(mb *model.Batch, run int, from, c []float32, gammas []float64) ([][]float64, error) {
	moved := make([]float32, len(from))
	out := make([][]float64, len(gammas))
	for k, gamma := range gammas {
		g := float32(gamma)
		for j, v := range from {
			moved[j] = v - g*c[j]
		}
		if err := loadFlat(s.runParams[run], moved); err != nil {
			return nil, fmt.Errorf("held-out score: %w", err)
		}
		out[k] = s.windowLosses(mb)
	}
	return out, nil
}

// windowLosses is the copy's mean loss on each window (sequence) of mb, +Inf where it is
// not a number.
func (s *heldOutScorer) windowLosses(mb *model.Batch) []float64 {
	s.ws.Reset()
	var x []float32
	for _, l := range s.layers {
		x, _ = l.Forward(&s.ws, mb, x)
	}
	s.evals++
	out := make([]float64, mb.B)
	for w := range out {
		for _, v := range mb.RowLoss[w*mb.T : (w+1)*mb.T] {
			out[w] += v
		}
		out[w] /= float64(mb.T)
		if math.IsNaN(out[w]) {
			out[w] = math.Inf(1)
		}
	}
	return out
}

// loadFlat copies the flat vector v into ps, in order.
func loadFlat(ps []*model.Param, v []float32) error {
	if n := countParams(ps); n != len(v) {
		return fmt.Errorf("%d values for %d parameters", len(v), n)
	}
	for _, p := range ps {
		v = v[copy(p.Value.Data, v):]
	}
	return nil
}

// ScoreFloor is the share of the group's reference score (the upper median of the
// scores) a contribution must reach: one that lowers the held-out loss by less than a
// quarter of what the median contribution does is dropped too. An update shrunk to
// nothing (×0.05) lowers the loss a little, passes every other check, and dilutes the
// aggregate (+13% for one of three under DiLoCo); honest contributions score within a
// small factor of one another. The upper median, so that two shrunk colluders of four
// cannot set it; a colluder cannot raise it far either, as its score is at most that of
// its direction at the group's length.
const ScoreFloor = 0.25

// scoreRejections drops (sets to nil) the contributions of all whose held-out gain lies
// under the floor by more than ScoreNoise standard errors, and says why, by member. The
// floor is ScoreFloor of the gain of the upper-median contribution (by gain) when that
// one clearly lowers the held-out loss (by more than ScoreNoise standard errors); when it
// does not, the held-out batch shows no direction the group agrees on, and only a
// contribution whose loss is not a number is dropped: near convergence, at steps where
// the honest gradients pull apart, a gradient of two sequences often truly raises the
// held-out loss at two to four standard errors (sync, four replicas: 18 of 112 honest
// contributions scored in 300 steps were dropped), and dropping it would name an honest
// member. When
// none clears the floor, every contribution is dropped and nobody is named: the
// collective then moves nothing (its result is zero).
func scoreRejections(all [][]float32, scores []heldOutScore) map[int]string {
	var kept []heldOutScore
	for m, v := range all {
		if v != nil {
			kept = append(kept, scores[m])
		}
	}
	floor := math.Inf(-1)
	if ref := upperMedianScore(kept); ref.gain-ScoreNoise*ref.se > 0 {
		floor = ScoreFloor * ref.gain
	}
	out := map[int]string{}
	improves := 0
	for m, v := range all {
		if v != nil && scores[m].upper() > floor {
			improves++
		}
	}
	for m, v := range all {
		if v == nil || scores[m].upper() > floor {
			continue
		}
		sc := scores[m]
		switch {
		case improves == 0:
			out[m] = ""
		case sc.gain > 0:
			out[m] = fmt.Sprintf("lowers the held-out loss by %.3g ± %.2g, under %g× the group's %.3g (held-out score)", sc.gain, sc.se, ScoreFloor, floor/ScoreFloor)
		case math.IsInf(floor, -1):
			out[m] = "its held-out loss is not a number (held-out score)"
		default:
			out[m] = fmt.Sprintf("raises the held-out loss by %.3g ± %.2g (held-out score)", -sc.gain, sc.se)
		}
	}
	return out
}

// upperMedianScore is the score of v at the upper median of the finite gains (zero when
// none is finite).
func upperMedianScore(v []heldOutScore) heldOutScore {
	var finite []heldOutScore
	for _, x := range v {
		if !math.IsNaN(x.gain) && !math.IsInf(x.gain, 0) {
			finite = append(finite, x)
		}
	}
	if len(finite) == 0 {
		return heldOutScore{}
	}
	slices.SortStableFunc(finite, func(a, b heldOutScore) int { return cmp.Compare(a.gain, b.gain) })
	return finite[len(finite)/2]
}

// upperMedian is the upper median of the finite values of v (0 when none is).
func upperMedian(v []float64) float64 {
	var finite []float64
	for _, x := range v {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			finite = append(finite, x)
		}
	}
	if len(finite) == 0 {
		return 0
	}
	slices.Sort(finite)
	return finite[len(finite)/2]
}

// upperMedianNorm is the norm bound's reference when contributions are scored: the upper
// median of the finite norms. The lower median (refNorm) lets two colluders of four that
// send shrunk updates (×0.05) own the reference, and the honest contributions were then
// dropped as outsized and reported; scored, an outsized contribution (×1000, 1e38) is
// refused by its held-out loss instead, which its own norm cannot raise.
func upperMedianNorm(norms []float64) float64 {
	var ok []float64
	for _, n := range norms {
		if n >= 0 {
			ok = append(ok, n)
		}
	}
	return upperMedian(ok)
}

// gradientScore is the held-out score of run i's gradients (every-step sync, ZeRO), nil
// when the worker does not score: from the current weights (the same on every replica), a
// step along each contribution of length GradientProbe·LR (its direction: the norm check
// already bounds its length, and AdamW and clipping its effect).
//
// A pipelined replica's stage node scores only when it holds the stage weight mirror of
// this step's period (mirrored); otherwise the collective falls back to the unscored checks.
func (w *Worker) gradientScore(i int) func([][]float32) ([]heldOutScore, error) {
	if w.scorer == nil || !w.mirrored() {
		return nil
	}
	return w.gradientScoreBy(i, func() (*heldOutScorer, error) { return w.scorer, nil })
}

// contestedScore is gradientScore for a worker that scores only contested collectives
// (score: auto under every-step sync and ZeRO), nil for any other: its scorer is built
// the first time a collective is contested (in a pipelined replica at the start, for the
// stage weight mirror to load into).
func (w *Worker) contestedScore(i int) func([][]float32) ([]heldOutScore, error) {
	if w.onDemand == nil || !w.mirrored() {
		return nil
	}
	return w.gradientScoreBy(i, w.onDemand.get)
}

func (w *Worker) gradientScoreBy(i int, scorer func() (*heldOutScorer, error)) func([][]float32) ([]heldOutScore, error) {
	return func(all [][]float32) ([]heldOutScore, error) {
		s, err := scorer()
		if err != nil {
			return nil, err
		}
		base := make([][]float32, len(w.runs))
		for r := range w.runs {
			base[r] = flattenValues(w.runParams[r])
		}
		length := GradientProbe * w.cfg.Train.LR
		return s.scores(w.step, i, base, nil, all, func(c []float32) []float64 {
			if n := norm2(c); n > 0 {
				return []float64{length / n}
			}
			return []float64{0}
		})
	}
}

// contestedLength is the length rule of a contested gradient collective: no size is
// trusted there (either pair may have chosen its own), so every admitted contribution
// counts by its direction only, rescaled to the clip norm, the largest aggregate a step
// applies anyway (AdamW makes the step nearly blind to the gradient's scale). Without it
// two colluders of four that send their gradient ×1000 pass the upper-median norm
// reference and the direction score, and own the mean.
func (w *Worker) contestedLength(_ []string, all [][]float32) error {
	if w.cfg.Train.ClipNorm <= 0 {
		return nil // no clipping: no size but the contributions' own
	}
	for m, c := range all {
		if c != nil {
			if n := norm2(c); n > 0 {
				all[m] = scaled(c, w.cfg.Train.ClipNorm/n)
			}
		}
	}
	return nil
}

// onDemandScorer builds a held-out scorer the first time one is needed: a worker that
// scores only contested collectives holds no copy of the model until one is.
type onDemandScorer struct {
	mu    sync.Mutex
	build func() (*heldOutScorer, error)
	s     *heldOutScorer
}

func (o *onDemandScorer) get() (*heldOutScorer, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.s == nil {
		s, err := o.build()
		if err != nil {
			return nil, err
		}
		o.s = s
	}
	return o.s, nil
}

// contested says whether the norm check of four or more finite contributions depends
// on which median it takes as reference: whether the lower median (refNorm) drops more of
// them than the upper one (upperMedianNorm). Two against two, the check cannot tell
// whether the small pair is shrunk (×0.05: against the lower median the honest pair would
// be dropped as outsized and the honest members would name each other offenders) or the
// large pair outsized (×1000). One outsized contribution of four is over both medians and
// honest contributions, within a small factor of one another, are over neither, so a run
// that scores only contested collectives pays nothing while honest.
func contested(norms []float64) bool {
	lo, hi := refNorm(norms), upperMedianNorm(norms)
	finite, diff := 0, 0
	for _, n := range norms {
		if math.IsNaN(n) || math.IsInf(n, 0) || n < 0 {
			continue
		}
		finite++
		if (admissible(n, lo) != "") != (admissible(n, hi) != "") {
			diff++
		}
	}
	return finite >= 4 && diff > 0
}

// normReference is the norm bound's reference for norms: the lower median (refNorm),
// or the upper median (upperMedianNorm) when the collective is scored. A collective whose
// check is contested, or whose admissible norms spread over GradientSpread
// (sizesDisagree), is scored when the policy has scoreContested, and its contributions
// are rescaled by lengthContested (score: on included) where the policy has no length.
func (p *policy) normReference(norms []float64) float64 {
	if contested(norms) || sizesDisagree(norms) {
		if p.score == nil {
			p.score = p.scoreContested
		}
		if p.score != nil && p.length == nil {
			p.length = p.lengthContested
		}
	}
	if p.score != nil {
		return upperMedianNorm(norms)
	}
	return refNorm(norms)
}

// scoreIfPullingApart makes a gradient collective that is not scored scored (by
// scoreContested, score: auto) when its admitted contributions pull against one another
// (pullApart).
func (p *policy) scoreIfPullingApart(all [][]float32) {
	if p.score == nil && p.scoreContested != nil && pullApart(all) {
		p.score = p.scoreContested
	}
}

// GradientSpread is how far apart the admissible gradients' norms of a collective may lie
// before score: auto scores it and counts its contributions by direction: honest
// replicas' gradients lay within 4.5× of one another in every honest run measured (three
// and four replicas of two sequences each, to a validation loss of 0.08; within 1.3×
// early in training), while two colluders of four that send theirs ×15 or ×−15 stay
// inside the 16× norm bound and, owning half of every order statistic, pass the distance
// check.
const GradientSpread = 8

// sizesDisagree says whether the finite norms that the norm check admits against the
// lower median spread over GradientSpread.
func sizesDisagree(norms []float64) bool {
	ref := refNorm(norms)
	var ok []float64
	for _, n := range norms {
		if n > 0 && admissible(n, ref) == "" {
			ok = append(ok, n)
		}
	}
	return len(ok) >= 2 && !spreadWithin(ok, GradientSpread)
}

// pullApart says whether three or more contributions (nil ones left out) pull against
// one another: ‖Σ c‖² < Σ ‖c‖², their pairwise inner products summing below zero.
// Honest gradients of one model on different batches mostly agree (the sum over all pairs
// was below zero in none of the steps early in training, in 10% of them near convergence
// with two sequences per replica, where scoring them drops nothing); two colluders of four
// that send their gradient reversed, at an honest size and as central as an honest one,
// pull against the honest pair in every step.
func pullApart(all [][]float32) bool {
	var present [][]float32
	for _, c := range all {
		if c != nil {
			present = append(present, c)
		}
	}
	if len(present) < 3 {
		return false
	}
	var each, sum float64
	for i := range present[0] {
		var s float64
		for _, c := range present {
			v := float64(c[i])
			s += v
			each += v * v
		}
		sum += s * s
	}
	return sum < each
}

// suspect says whether ZeRO's reduce-scatter, from the contributions' norms as their
// members claim them and the squared norm of their sum, leaves a collective that score:
// auto must gather whole and check as every-step sync does: its norm check contested, its
// norms spread over GradientSpread, its contributions pulling apart, or a sum longer than
// the claimed norms allow (‖Σ c‖ ≤ Σ ‖c‖: a member claimed a norm it did not send). Each
// chunk's owner also checks the contributions to its chunk as they were sent (reduceShard).
func suspect(norms []float64, sumSquares float64) bool {
	var total float64
	for _, n := range norms {
		total += n
	}
	return contested(norms) || sizesDisagree(norms) || sumsPullApart(sumSquares, norms) ||
		!(math.Sqrt(sumSquares) <= total*(1+1e-4))
}

// sumsPullApart is pullApart from what ZeRO's reduce-scatter leaves every member: the
// squared norm of the contributions' sum (sumSquares) and their norms as their members
// claim them.
func sumsPullApart(sumSquares float64, norms []float64) bool {
	var each float64
	finite := 0
	for _, n := range norms {
		if n >= 0 && !math.IsInf(n, 0) {
			each += n * n
			finite++
		}
	}
	return finite >= 3 && sumSquares < each
}

// GradientProbe is the length, in learning rates, of the step along a gradient that
// scores it: long enough that the loss it removes stands well above float32 rounding,
// short enough to stay first-order (1 to 30 gave the same drops in the poisoning table).
const GradientProbe = 10

// outerScore is the held-out score of run i's pseudo-gradients under DiLoCo, nil when the
// worker does not score. From the anchors (the weights every replica took at the last
// outer step) each contribution Δ is applied twice and must lower the loss both times:
// whole, anchor − Δ (its replica's weights, as it claims them), and along its direction
// at the group's length ℓ (the lower median of the contributions' norms), anchor −
// ℓ·Δ/‖Δ‖. The first refuses an update that overshoots; the second one that points the
// wrong way however long it is (×−15 of an honest update, whose overshoot can lower the
// loss early in training, then drags the outer momentum the wrong way).
func (s *dilocoSync) outerScore(i int) func([][]float32) ([]heldOutScore, error) {
	return s.outerScoreAt(i, s.now)
}

// outerPoint is the point an outer step is scored from: the step (whose held-out batch
// the score draws), the worker's runs' anchors, and in a pipelined replica the other
// stages' anchors (nil: those the scorer holds, loaded by the last exchange).
type outerPoint struct {
	step   int
	base   [][]float32
	others [][]float32
}

// now is the point an outer step is scored from when it runs on the worker's goroutine:
// the current step and the anchors as they are (the other stages' as this step's anchor
// exchange loaded them).
func (s *dilocoSync) now() outerPoint {
	base := make([][]float32, len(s.outer))
	for r, o := range s.outer {
		base[r] = o.anchor
	}
	return outerPoint{step: s.w.step, base: base}
}

// frozen is the point of now copied: the step and anchors an outer step of streaming
// DiLoCo is scored from while it runs beside the next steps, which move the anchors of
// the fragments whose updates they apply (and, in a pipelined replica, whose launches
// load the other stages' anchors of their own step: the copy keeps this launch's). Every
// replica takes it at the same step, after the same updates, so all score from the same
// point.
func (s *dilocoSync) frozen() func() outerPoint {
	pt := s.now()
	for r := range pt.base {
		pt.base[r] = slices.Clone(pt.base[r])
	}
	if s.w.numStages > 1 && s.w.scorer != nil {
		pt.others = s.w.scorer.stageAnchors(s.w.stage) // copies
	}
	return func() outerPoint { return pt }
}

// outerScoreAt is outerScore from the point at returns.
func (s *dilocoSync) outerScoreAt(i int, at func() outerPoint) func([][]float32) ([]heldOutScore, error) {
	w := s.w
	if !s.canScore() {
		return nil
	}
	return func(all [][]float32) ([]heldOutScore, error) {
		pt := at()
		norms := make([]float64, len(all))
		for m, c := range all {
			norms[m] = math.NaN()
			if c != nil {
				norms[m] = norm2(c)
			}
		}
		length := refNorm(norms)
		return w.scorer.scores(pt.step, i, pt.base, pt.others, all, func(c []float32) []float64 {
			probes := []float64{1}
			if n := norm2(c); n > 0 {
				probes = append(probes, length/n)
			}
			return probes
		})
	}
}

// flattenValues is ps's values, in order, as one vector.
func flattenValues(ps []*model.Param) []float32 {
	out := make([]float32, 0, countParams(ps))
	for _, p := range ps {
		out = append(out, p.Value.Data...)
	}
	return out
}

// LengthSpread is how far apart the admitted pseudo-gradients' norms (per sequence of
// each member's batch) may lie before the outer step's length is no longer theirs:
// honest replicas' updates differ in size by a small factor (at most 1.05 in the in-bound
// table's honest runs, so those keep their bits; 1.30 near convergence with two sequences
// per replica, H = 5, where the rule then evens honest lengths). Two colluders of four
// that send a good direction at another size own half of every order statistic of the
// norms (and of the scores, which see direction, not size); past the spread every
// contribution counts at one length (LengthSearchSpread says which). Inside it a pair
// still weighs what it likes within 1.1× (×0.9: +2.3% in the table's setting); at 1.4×,
// ×0.75 passed (+6.1% to +6.4%), at 2×, ×0.6 (+10.3%).
const LengthSpread = 1.1

// LengthSearchSpread is the spread of the admitted norms (per sequence) past which the
// held-out loss chooses the outer step's length (longestEfficient); between LengthSpread
// and it, every contribution counts at the upper median of the lengths, no held-out pass
// needed. Honest updates near convergence spread up to 1.30×, and the line search there
// takes the longest honest length, whose step still removes loss at nearly the shortest's
// rate: every outer step that fired was lengthened, and a converging run overshot (DiLoCo
// H = 5, four replicas, 300 steps: validation loss 0.0673 against 0.0614 unrescaled).
// The upper median is the longer pair's length two against two (×0.75: the honest one),
// the honest one against a single shrunk or lengthened update of three.
const LengthSearchSpread = 1.4

// outerLength is run i's length rule under DiLoCo, nil when the worker does not score:
// the norms are taken per sequence of each member's batch (an honest update is weighed by
// its replica's batch share); when they spread more than LengthSpread, every admitted
// contribution is rescaled to one length ℓ per sequence (its batch weighting kept): up to
// LengthSearchSpread the upper median of those norms, past it the one the held-out loss
// of the aggregate step anchor − ℓ·u chooses among them (u the rule's aggregate of the
// batch-weighted directions): longestEfficient. Every honest member runs it on the same
// contributions and batch, so all choose the same ℓ.
func (s *dilocoSync) outerLength(i int) func([]string, [][]float32) error {
	return s.outerLengthAt(i, s.now)
}

// outerLengthAt is outerLength from the point at returns.
func (s *dilocoSync) outerLengthAt(i int, at func() outerPoint) func([]string, [][]float32) error {
	w := s.w
	if !s.canScore() {
		return nil
	}
	share := map[string]float64{} // each member's batch: an honest update is weighed by it
	for r, rep := range w.plan.Replicas {
		b, _, _ := w.plan.replicaBatch(r, w.cfg.Train.Batch)
		for _, st := range rep { // a later stage's group holds its replica's stage node
			share[st.Node] = float64(b)
		}
	}
	return func(members []string, all [][]float32) error {
		var lengths []float64 // each admitted norm per sequence of its batch
		for m, c := range all {
			if c != nil {
				b := share[members[m]]
				if b <= 0 {
					b = 1
				}
				lengths = append(lengths, norm2(c)/b)
			}
		}
		if len(lengths) < 2 || spreadWithin(lengths, LengthSpread) {
			return nil // honest sizes: the aggregate keeps its bits
		}
		if spreadWithin(lengths, LengthSearchSpread) {
			equaliseTo(all, lengths, upperMedian(lengths))
			return nil
		}
		var dirs [][]float32
		for k, c := range slices.DeleteFunc(slices.Clone(all), func(c []float32) bool { return c == nil }) {
			if lengths[k] == 0 {
				dirs = append(dirs, c) // no direction: it stays zero
				continue
			}
			dirs = append(dirs, scaled(c, 1/lengths[k])) // its direction times its batch
		}
		u := make([]float32, len(dirs[0]))
		combine(u, dirs, w.cfg.Sync.Aggregate)
		pt := at()
		lengths = slices.Compact(slices.Sorted(slices.Values(slices.DeleteFunc(slices.Clone(lengths), func(n float64) bool { return n == 0 }))))
		if len(lengths) == 0 {
			return nil
		}
		losses, err := w.scorer.losses(pt.step, i, pt.base, pt.others, u, append([]float64{0}, lengths...))
		if err != nil {
			return err
		}
		best := longestEfficient(lengths, losses[0], losses[1:])
		k := 0
		for m, c := range all {
			if c != nil {
				all[m] = scaled(dirs[k], lengths[best])
				k++
			}
		}
		return nil
	}
}

// LengthEfficiency is the share of the shortest candidate's loss reduction per unit of
// length that a longer outer step must keep to be chosen (Armijo's sufficient decrease,
// with the slope measured at the shortest candidate).
const LengthEfficiency = 0.5

// longestEfficient returns the index of the longest of lengths (ascending) whose step
// still lowers the held-out loss l0 by at least LengthEfficiency of the shortest's
// reduction per unit of length (losses[k] is the loss after a step of lengths[k]): the
// greedy least loss would choose a too-long step (×15) that lowers the held-out loss
// today and overshoots with the outer momentum; a shrunk one (×0.05) is passed over as
// soon as a longer one keeps the slope.
func longestEfficient(lengths []float64, l0 float64, losses []float64) int {
	slope := (l0 - losses[0]) / lengths[0]
	best := 0
	if !(slope > 0) {
		return best
	}
	for k := 1; k < len(lengths); k++ {
		if (l0-losses[k])/lengths[k] >= LengthEfficiency*slope {
			best = k
		}
	}
	return best
}

// spreadWithin says whether the positive values v lie within a factor f of one another.
func spreadWithin(v []float64, f float64) bool {
	lo, hi := slices.Min(v), slices.Max(v)
	return lo > 0 && hi <= f*lo
}

// scaled is a copy of x times a.
func scaled(x []float32, a float64) []float32 {
	out := make([]float32, len(x))
	f := float32(a)
	for j, v := range x {
		out[j] = f * v
	}
	return out
}

// equaliseTo rescales each contribution of all (nil ones left alone) whose length, in
// order among the others, is lengths[k] to length target, whatever else weighs it (its
// batch share) kept.
func equaliseTo(all [][]float32, lengths []float64, target float64) {
	k := 0
	for m, c := range all {
		if c == nil {
			continue
		}
		if lengths[k] > 0 && lengths[k] != target {
			all[m] = scaled(c, target/lengths[k])
		}
		k++
	}
}
