package api

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"net/http"
	"strconv"
)

// AnswerTrailer is the HTTP trailer in which a node signs its answer to a signed request:
// hex(HMAC-SHA256(token, answerLabel \n the request's MAC \n status \n SHA-256(body))). It
// is bound to the request's MAC (fresh for each request), so an answer cannot be replayed
// for another request, and a process that took the API's address after the node proved
// itself cannot answer in its place.
const AnswerTrailer = "Meshnode-Answer-Mac"

const answerLabel = "meshnode-api-answer/1"

// answerMAC is the MAC of an answer with status and body to the request whose MAC is
// reqMAC.
func answerMAC(token string, reqMAC []byte, status int, bodySum [sha256.Size]byte) []byte {
	return mac(token, answerLabel, hex.EncodeToString(reqMAC), strconv.Itoa(status), hex.EncodeToString(bodySum[:]))
}

// SignAnswers wraps next so that its answer to a request signed with AuthScheme carries
// AnswerTrailer. Requests must have been verified before (Verify); others pass unchanged.
func (v *Verifier) SignAnswers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sig, err := parseSignature(r.Header.Get("Authorization"))
		if err != nil {
			next.ServeHTTP(w, r)
			return
		}
		aw := &answerWriter{ResponseWriter: w, sum: sha256.New()}
		next.ServeHTTP(aw, r)
		aw.WriteHeader(http.StatusOK) // no-op if the handler wrote a status
		var bodySum [sha256.Size]byte
		aw.sum.Sum(bodySum[:0])
		w.Header().Set(AnswerTrailer, hex.EncodeToString(answerMAC(v.token, sig.mac, aw.status, bodySum)))
	})
}

// answerWriter hashes what the handler writes and declares AnswerTrailer before the status
// goes out (a declared trailer makes the server send the body chunked).
type answerWriter struct {
	http.ResponseWriter
	sum    hash.Hash
	status int // 0 until the status is written
}

func (a *answerWriter) WriteHeader(status int) {
	if a.status != 0 {
		return
	}
	a.status = status
	h := a.ResponseWriter.Header()
	h.Add("Trailer", AnswerTrailer)
	h.Del("Content-Length") // a fixed length leaves no room for a trailer
	a.ResponseWriter.WriteHeader(status)
}

func (a *answerWriter) Write(b []byte) (int, error) {
	a.WriteHeader(http.StatusOK)
	a.sum.Write(b)
	return a.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the server's writer (Flush, deadlines).
func (a *answerWriter) Unwrap() http.ResponseWriter { return a.ResponseWriter }
