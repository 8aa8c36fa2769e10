// Package artifact makes a fold transferable: it exports a consistent,
// verified, content-addressed artifact of a [fold.Store], packs it as a tar,
// imports it (verifying everything, since the store is untrusted), and
// defines the [Store] that keeps artifacts behind a monotone pointer.
// The stores live in sub-packages, one per backend (dirstore: a local
// directory; s3store: S3), and pass one contract suite (storetest); the
// fleet-wide export lease is package lease, and the export round that ties
// them together is package round (round.Run).
//
// # Artifact
//
// An artifact is a directory: the pebble checkpoint under data/ and
// MANIFEST.json (see [Manifest]) describing it: schema version, backend
// identity and format versions, the cursor the data is exactly consistent
// with (memo included), the watch scope, the plugin identity, and every
// file's size and BLAKE3 digest. [Export] writes the manifest last and
// renames the staged directory into place, so an artifact directory that
// exists is complete; a crash mid-export leaves only a hidden temp directory
// under the stage parent.
//
// The manifest's bytes are canonical (one encoding per manifest), and the
// first 8 bytes of their BLAKE3, in hex, are the payload's content address
// ([Manifest.Address]): `<key>.payloads/<hex8>.tar`. The manifest is the
// single trusted object; readers derive the payload name from it and never
// trust a separately stored name.
//
// # Import
//
// [Import] streams a tar into a hidden temp directory beside the destination,
// refusing (with an error wrapping [ErrArtifactInvalid]) anything that is not
// exactly the manifest's files with the manifest's hashes, followed by an
// embedded MANIFEST.json byte-equal to the trusted manifest bytes. It then
// opens the staged copy with [fold.Open], requires the recovered cursor to
// equal the manifest's, and renames it into place. A bad artifact never
// becomes a fold and a failed import leaves the destination as it was.
//
// # Store and pointer
//
// [Store] is what an exporter and a bootstrapping node need from a place
// that keeps artifacts. Payloads are write-once, named by their manifest's
// address; the pointer `<key>.manifest.json` holds the manifest bytes of the
// published artifact and is swapped by compare-and-swap only when
// [protocol.PointerPublishAllowed] admits the candidate, so the published
// rank never regresses (a corrupt pointer is replaceable). Losing the race is
// the normal outcome [SupersededByNewer], not an error. Prune deletes a
// payload only when [protocol.PayloadPrunable] says so; production must
// prune with a grace period that outlasts every upload-to-swap window (4 ×
// lease TTL, RATIONALE.md "Prune needs a grace period even with the strict
// rank rule"), never zero.
//
// Stage parents and import destinations must be on the fold's filesystem:
// checkpoints hard-link sstables and renames must not cross devices.
package artifact
