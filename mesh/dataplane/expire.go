package dataplane

import "time"

// expireLoop drops, every quarter of UnknownJobTTL, the frames that have waited that long
// for a job this node does not run (Config.RunsJob), until Close.
func (d *Plane) expireLoop() {
	defer d.wg.Done()
	ttl := d.cfg.unknownJobTTL()
	t := time.NewTicker(max(ttl/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-d.ctx.Done():
			return
		case <-t.C:
			if n := d.box.ExpireUnknown(ttl, d.cfg.RunsJob); n > 0 {
				d.log.Info("dropped frames of a job this node does not run", "frames", n, "waited", ttl)
			}
		}
	}
}
