package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/meshnode/meshnode/api"
	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
)

// jobAPITimeout bounds one job API request, forwarding to the leader included.
const jobAPITimeout = 15 * time.Second

// datasetPublishTimeout bounds packing and storing a submitted job's dataset.
const datasetPublishTimeout = 5 * time.Minute

// jobRoutes serves the job API:
//
//	POST   /v1/jobs          a job spec (YAML or JSON) → 201 {"id":..}; 400 naming bad fields;
//	                         local data paths must lie under the api.DataRootHeader directory
//	                         or a configured data root
//	GET    /v1/jobs          [{"id","name","status","submitted_at"}], oldest first
//	GET    /v1/jobs/{id}     consensus.JobDetail; 404 when unknown
//	DELETE /v1/jobs/{id}     cancel → the job's summary; 404 unknown, 409 already finished
//	GET    /v1/raft          consensus.RaftStatus
//	POST   /v1/raft/{promote,refuse}/{id}   raft_api.go
//
// Reads come from the local FSM; ?consistent=true reads through the leader.
func (n *Node) jobRoutes(s *consensusService) {
	h := jobHandlers{s: s}
	n.mux.HandleFunc("POST /v1/jobs", h.submit)
	n.mux.HandleFunc("GET /v1/jobs", h.list)
	n.mux.HandleFunc("GET /v1/jobs/{id}", h.get)
	n.mux.HandleFunc("DELETE /v1/jobs/{id}", h.cancel)
	n.mux.HandleFunc("GET /v1/raft", h.raft)
	n.raftRoutes(s)
}

type jobHandlers struct{ s *consensusService }

// consensus returns the running control plane, or answers 503 and returns nil.
func (h jobHandlers) consensus(w http.ResponseWriter) *consensus.Consensus {
	c := h.s.get()
	if c == nil {
		replyError(w, http.StatusServiceUnavailable, errors.New("the control plane is not running on this node"))
	}
	return c
}

func (h jobHandlers) submit(w http.ResponseWriter, r *http.Request) {
	c := h.consensus(w)
	if c == nil {
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, jobspec.MaxSpecBytes+1))
	if err != nil {
		code := http.StatusBadRequest
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			code = http.StatusRequestEntityTooLarge
			err = fmt.Errorf("job spec: larger than %d bytes", jobspec.MaxSpecBytes)
		}
		replyError(w, code, err)
		return
	}
	spec, err := jobspec.Parse(body)
	if err != nil {
		replyError(w, http.StatusBadRequest, err)
		return
	}
	// The corpus (and model.init's directory) is read here, where its paths live, and
	// published as blobs that every node of the job fetches; a missing, refused or
	// unusable path is the user's error.
	pctx, pcancel := context.WithTimeout(r.Context(), datasetPublishTimeout)
	err = h.s.n.publishSpecFiles(pctx, &spec, r.Header.Get(api.DataRootHeader))
	pcancel()
	if err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, model.ErrBadData) || spec.Data.Tokenizer != "" && spec.Data.Blob != "" {
			code = http.StatusBadRequest
		}
		replyError(w, code, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), jobAPITimeout)
	defer cancel()
	id, err := c.SubmitJob(ctx, spec)
	if err != nil {
		replyError(w, statusOf(err), err)
		return
	}
	// The dataset reaches other members before the answer, so that the submitter may
	// leave once it has it: a job the control plane holds is what makes them accept it.
	rctx, rcancel := context.WithTimeout(r.Context(), datasetReplicaTimeout)
	holders, err := h.s.n.replicateDataset(rctx, id, spec.Data.Blob)
	if err != nil {
		h.s.n.log.Warn("replicate dataset", "job", id, "err", err)
	}
	if spec.Model.InitBlob != "" {
		if _, err := h.s.n.replicateDataset(rctx, id, spec.Model.InitBlob); err != nil {
			h.s.n.log.Warn("replicate initial weights", "job", id, "err", err)
		}
	}
	rcancel()
	replyJSON(w, http.StatusCreated, api.SubmitResult{ID: id, DatasetHolders: holders})
}

func (h jobHandlers) list(w http.ResponseWriter, r *http.Request) {
	c := h.consensus(w)
	if c == nil {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), jobAPITimeout)
	defer cancel()
	jobs, _, err := c.Jobs(ctx, r.URL.Query().Get("consistent") == "true")
	if err != nil {
		replyError(w, statusOf(err), err)
		return
	}
	out := make([]api.JobSummary, 0, len(jobs))
	for i := range jobs {
		out = append(out, jobs[i].Summary())
	}
	replyJSON(w, http.StatusOK, out)
}

func (h jobHandlers) get(w http.ResponseWriter, r *http.Request) {
	c := h.consensus(w)
	if c == nil {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), jobAPITimeout)
	defer cancel()
	j, index, err := c.Job(ctx, r.PathValue("id"), r.URL.Query().Get("consistent") == "true")
	if err != nil {
		replyError(w, statusOf(err), err)
		return
	}
	replyJSON(w, http.StatusOK, j.Detail(index))
}

func (h jobHandlers) cancel(w http.ResponseWriter, r *http.Request) {
	c := h.consensus(w)
	if c == nil {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), jobAPITimeout)
	defer cancel()
	id := r.PathValue("id")
	if err := c.CancelJob(ctx, id); err != nil {
		replyError(w, statusOf(err), err)
		return
	}
	j, _, err := c.Job(ctx, id, true)
	if err != nil {
		replyError(w, statusOf(err), err)
		return
	}
	replyJSON(w, http.StatusOK, j.Summary())
}

func (h jobHandlers) raft(w http.ResponseWriter, r *http.Request) {
	c := h.consensus(w)
	if c == nil {
		return
	}
	st, err := c.Status(r.Context())
	if err != nil {
		replyError(w, statusOf(err), err)
		return
	}
	replyJSON(w, http.StatusOK, st)
}

// statusOf maps consensus errors to HTTP statuses.
func statusOf(err error) int {
	switch {
	case errors.Is(err, consensus.ErrInvalidSpec), errors.Is(err, consensus.ErrBadRequest), errors.Is(err, consensus.ErrBadTransition):
		return http.StatusBadRequest
	case errors.Is(err, consensus.ErrJobNotFound):
		return http.StatusNotFound
	case errors.Is(err, consensus.ErrForbidden):
		return http.StatusForbidden
	case errors.Is(err, consensus.ErrQuota):
		return http.StatusTooManyRequests
	case errors.Is(err, consensus.ErrJobFinished), errors.Is(err, consensus.ErrStaleEpoch):
		return http.StatusConflict
	case errors.Is(err, consensus.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, consensus.ErrNoLeader), errors.Is(err, consensus.ErrNotLeader), errors.Is(err, consensus.ErrShutdown),
		errors.Is(err, consensus.ErrLeadershipLost), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func replyJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func replyError(w http.ResponseWriter, code int, err error) {
	replyJSON(w, code, api.ErrorBody{Error: err.Error()})
}
