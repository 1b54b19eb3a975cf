package history

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// EventSample is an event's figures at one moment (At, the line store's clock).
type EventSample struct {
	At         time.Time
	Generation uint32 // the line's generation: ticket numbers and totals restart with a new one
	Waiting    int64
	Active     int64
	MaxActive  int64 // the configuration's, when sampled
	Serving    int64
	// AdmittedTotal and LastNumber are running totals of the line (admissions; tickets given
	// out, i.e. joins that took a place).
	AdmittedTotal int64
	LastNumber    int64
	Paused        bool
	// The sale: Capacity is 0 when the event sells nothing.
	Capacity, Sold, Held int64
	// Rejected and Unavailable are the fleet's running totals of answers 429 and 503 on the
	// event's routes (the counters CounterRejected and CounterUnavailable).
	Rejected, Unavailable int64
	// LeftWaiting and Unclaimed are the line's running totals of tickets that left while
	// waiting and of admissions that lapsed unclaimed (queue.Stats); SoldOut is the line's flag.
	LeftWaiting, Unclaimed int64
	SoldOut                bool
	// Refusals are the fleet's running totals of the line's refusals in this life of the
	// event, by kind in the order of RefusalKinds (the counters RefusalCounter of LifeSeries).
	Refusals [4]int64
	// Life names the life of the event the sample is of (LifeOf its Epoch): an event deleted
	// and made again under its id keeps its series, and its samples of an earlier life are
	// not its own (SameLife). 0 in a sample written before the field was (read as any life).
	Life int64
	// VoidLeft is the line's void numbers still void (queue.Stats.VoidLeft): numbers of its last
	// resume after a store loss that nobody knows were handed out, which LastNumber jumped
	// past. 0 when there are none (and in a sample written before the field was).
	VoidLeft int64
}

// LifeOf is the Life of samples of an event of epoch (event.Event.Epoch, 16 hex characters:
// its 8 bytes as an integer); 0 for "" or anything else.
func LifeOf(epoch string) int64 {
	v, err := strconv.ParseUint(epoch, 16, 64)
	if err != nil || len(epoch) != 16 {
		return 0
	}
	return int64(v)
}

// SameLife returns the samples (in place) of life: those of an earlier life of the event are
// dropped, those that do not name theirs (Life 0) kept.
func SameLife(samples []EventSample, life int64) []EventSample {
	return slices.DeleteFunc(samples, func(s EventSample) bool { return s.Life != 0 && s.Life != life })
}

// GivenOut returns the tickets given out at each of samples (ascending by At): LastNumber less
// the void numbers still void (queue.Stats.VoidLeft), never less than at the sample before, as
// a running total of the line that, like LastNumber, starts again with a new generation (or a
// LastNumber that falls). A resume after a store loss jumps LastNumber past up to 1.5 blocks of
// 1,024 numbers nobody may hold (docs/durability.md): those are no arrivals until a holder
// shows up with one, and one counted before the loss is not counted again when it does. What
// it does not count: tickets given out between the line's last checkpoint (about a second) and
// the loss that no sample saw and whose holders never came back. After a second loss in one
// line, numbers of the first that were still void count as given out.
func GivenOut(samples []EventSample) []int64 {
	out := make([]int64, len(samples))
	for i, s := range samples {
		out[i] = max(0, s.LastNumber-s.VoidLeft)
		if p := i - 1; p >= 0 && s.Generation == samples[p].Generation && s.LastNumber >= samples[p].LastNumber {
			out[i] = max(out[i], out[p])
		}
	}
	return out
}

// CampaignSample is a coupon campaign's figures at one moment (At, the coupon store's clock).
type CampaignSample struct {
	At                                      time.Time
	Stock, Entries, Issued, Rejected, Taken int64
}

// Checkpoint is a point of an event's number clock: the last ticket number given out at At.
type Checkpoint struct {
	At         time.Time
	Generation uint32
	LastNumber int64
}

// The encodings are "v,<field>,<field>...": the format version first, then the fields in a
// fixed order as decimal integers. A decoder reads the fields it knows and takes 0 for missing
// trailing ones, so a field added at the end later reads as 0 from older samples.
const formatVersion = "1"

func encode(v ...int64) string {
	var b strings.Builder
	b.WriteString(formatVersion)
	for _, x := range v {
		b.WriteByte(',')
		b.WriteString(strconv.FormatInt(x, 10))
	}
	return b.String()
}

// decode reads n fields; ok is false for another format version or a malformed field.
func decode(data string, n int) ([]int64, bool) {
	parts := strings.Split(data, ",")
	if len(parts) == 0 || parts[0] != formatVersion {
		return nil, false
	}
	out := make([]int64, n)
	for i := 0; i < n && i+1 < len(parts); i++ {
		v, err := strconv.ParseInt(parts[i+1], 10, 64)
		if err != nil {
			return nil, false
		}
		out[i] = v
	}
	return out, true
}

func bit(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// Encode returns the sample as an Entry's data (At is the entry's own).
func (s EventSample) Encode() string {
	return encode(int64(s.Generation), s.Waiting, s.Active, s.MaxActive, s.Serving, s.AdmittedTotal, s.LastNumber,
		bit(s.Paused), s.Capacity, s.Sold, s.Held, s.Rejected, s.Unavailable,
		s.LeftWaiting, s.Unclaimed, bit(s.SoldOut), s.Refusals[0], s.Refusals[1], s.Refusals[2], s.Refusals[3], s.Life,
		s.VoidLeft)
}

// DecodeEventSample reads an entry of EventSeries; ok is false when it is not one.
func DecodeEventSample(e Entry) (EventSample, bool) {
	v, ok := decode(e.Data, 22)
	if !ok {
		return EventSample{}, false
	}
	return EventSample{At: e.At, Generation: uint32(v[0]), Waiting: v[1], Active: v[2], MaxActive: v[3], Serving: v[4],
		AdmittedTotal: v[5], LastNumber: v[6], Paused: v[7] == 1, Capacity: v[8], Sold: v[9], Held: v[10],
		Rejected: v[11], Unavailable: v[12], LeftWaiting: v[13], Unclaimed: v[14], SoldOut: v[15] == 1,
		Refusals: [4]int64{v[16], v[17], v[18], v[19]}, Life: v[20], VoidLeft: v[21]}, true
}

// Encode returns the sample as an Entry's data.
func (s CampaignSample) Encode() string {
	return encode(s.Stock, s.Entries, s.Issued, s.Rejected, s.Taken)
}

// DecodeCampaignSample reads an entry of CampaignSeries; ok is false when it is not one.
func DecodeCampaignSample(e Entry) (CampaignSample, bool) {
	v, ok := decode(e.Data, 5)
	if !ok {
		return CampaignSample{}, false
	}
	return CampaignSample{At: e.At, Stock: v[0], Entries: v[1], Issued: v[2], Rejected: v[3], Taken: v[4]}, true
}

// Encode returns the checkpoint as an Entry's data.
func (c Checkpoint) Encode() string { return encode(int64(c.Generation), c.LastNumber) }

// DecodeCheckpoint reads an entry of ClockSeries; ok is false when it is not one.
func DecodeCheckpoint(e Entry) (Checkpoint, bool) {
	v, ok := decode(e.Data, 2)
	if !ok {
		return Checkpoint{}, false
	}
	return Checkpoint{At: e.At, Generation: uint32(v[0]), LastNumber: v[1]}, true
}
