package balancer

import "github.com/meshnode/meshnode/consensus/jobspec"

// measuredCurves are the validation-loss curves DefaultProgress is derived from: the
// default model (4 layers, d 128, 4 heads, context 128) on builtin:gostd, lr 2e-3 with 30
// warm-up steps and a 1000-step cosine schedule, the first 400 steps, evaluated every 25
// (128 windows). Measured 2026-11-25 by
//
//	meshnode train --steps 1000 --stop-at 400 --eval-every 25 --transport memory --codec int8 -o json --out DIR \
//	    --batch 16 | --batch 8 | --batch 4 |
//	    --batch 8 --replicas 2 --sync diloco --inner-steps 50 |
//	    --batch 8 --replicas 2 --sync streaming --fragments 2 --inner-steps 50
//
// (losses are deterministic; `go run ./balancer/internal/gencurves` is not needed: the
// script is in docs/balancer.md, "Time to loss").
var measuredCurves = []LossCurve{
	{Name: "batch16", Batch: 16, Replicas: 1, Mode: jobspec.SyncEveryStep, Points: [][2]float64{{25, 3.5701}, {50, 2.9821}, {75, 2.8976}, {100, 2.8082}, {125, 2.7498}, {150, 2.7446}, {175, 2.6939}, {200, 2.6284}, {225, 2.5646}, {250, 2.5269}, {275, 2.5909}, {300, 2.5172}, {325, 2.5138}, {350, 2.5277}, {375, 2.4535}, {400, 2.4520}}},
	{Name: "batch8", Batch: 8, Replicas: 1, Mode: jobspec.SyncEveryStep, Points: [][2]float64{{25, 3.6414}, {50, 3.1627}, {75, 3.0420}, {100, 2.8871}, {125, 2.9448}, {150, 2.8652}, {175, 2.8624}, {200, 2.8603}, {225, 2.7165}, {250, 2.7413}, {275, 2.6680}, {300, 2.6976}, {325, 2.6200}, {350, 2.6368}, {375, 2.6330}, {400, 2.5980}}},
	{Name: "batch4", Batch: 4, Replicas: 1, Mode: jobspec.SyncEveryStep, Points: [][2]float64{{25, 3.6943}, {50, 3.3485}, {75, 3.1259}, {100, 3.0246}, {125, 3.0797}, {150, 2.9841}, {175, 2.9074}, {200, 2.8770}, {225, 2.8456}, {250, 2.9119}, {275, 2.8919}, {300, 2.8197}, {325, 2.8064}, {350, 2.8939}, {375, 2.8041}, {400, 2.8362}}},
	{Name: "diloco-2x8", Batch: 8, Replicas: 2, Mode: jobspec.SyncDiLoCo, Points: [][2]float64{{25, 3.6393}, {50, 3.1818}, {75, 3.0545}, {100, 3.0689}, {125, 2.9733}, {150, 2.9152}, {175, 2.7924}, {200, 2.7089}, {225, 2.7190}, {250, 2.6070}, {275, 2.6778}, {300, 2.5896}, {325, 2.5940}, {350, 2.5722}, {375, 2.5631}, {400, 2.5354}, {425, 2.5285}, {450, 2.4927}, {475, 2.4949}, {500, 2.4727}, {525, 2.4978}, {550, 2.4806}, {575, 2.4452}, {600, 2.4520}, {625, 2.4144}, {650, 2.4000}, {675, 2.3820}, {700, 2.3827}, {725, 2.3776}, {750, 2.3793}, {775, 2.3585}, {800, 2.3310}, {825, 2.3235}, {850, 2.3141}, {875, 2.3076}, {900, 2.3031}, {925, 2.3062}, {950, 2.2932}, {975, 2.2810}, {1000, 2.2694}}},
}
