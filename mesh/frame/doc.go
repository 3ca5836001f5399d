// Package frame is the wire format of meshnode's tensor data plane: the fixed 56-byte frame
// header (magic, version, kind, dtype, codec, job, epoch, step, micro-batch, index, shape,
// payload length, CRC32C), its encoding and validating decoding, the append-only kind,
// dtype and codec values, and the Mailbox that matches arriving frames with the receiver
// that asks for their key.
//
// It is what the training engine (package parallel) speaks, whatever carries the frames: the
// QUIC data plane (package dataplane) across machines, or an in-process transport in tests.
// A decoder checks every length in the header against its bound before allocating.
//
// frame must not import any network library (libp2p, quic-go) or any other meshnode
// package: the engine depends on it, and through it on nothing that opens a socket.
package frame
