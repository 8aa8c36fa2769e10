package router

// A strict scanner for exactly what SPEC.md accepts. It is hand-written (not
// encoding/json) so that the Go, C, AssemblyScript and Rust builds agree
// byte for byte on every edge: duplicate keys, escapes, number forms.

type upstream struct {
	addr   []byte // aliases the input
	weight int
}

const maxUpstreams = 64

type scanner struct {
	b   []byte
	i   int
	bad bool
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		s.bad = true
		return 0
	}
	return s.b[s.i]
}

func (s *scanner) expect(c byte) {
	if s.peek() != c {
		s.bad = true
		return
	}
	s.i++
}

// str scans a string and returns its raw bytes (escapes left as written) and
// whether it contained an escape.
func (s *scanner) str() (raw []byte, escaped bool) {
	s.expect('"')
	if s.bad {
		return nil, false
	}
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			raw = s.b[start:s.i]
			s.i++
			return raw, escaped
		case c < 0x20:
			s.bad = true
			return nil, false
		case c == '\\':
			escaped = true
			if s.i+1 >= len(s.b) {
				s.bad = true
				return nil, false
			}
			switch s.b[s.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i += 2
			case 'u':
				if s.i+6 > len(s.b) || !hex4(s.b[s.i+2:s.i+6]) {
					s.bad = true
					return nil, false
				}
				s.i += 6
			default:
				s.bad = true
				return nil, false
			}
		default:
			s.i++
		}
	}
	s.bad = true
	return nil, false
}

func hex4(b []byte) bool {
	for _, c := range b {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// number scans a JSON number; it returns the value when the number is a
// plain non-negative integer of at most 4 digits, else -1.
func (s *scanner) number() int {
	s.ws()
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	digits := s.i
	if s.i < len(s.b) && s.b[s.i] == '0' {
		s.i++
	} else {
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
		}
	}
	if s.i == digits {
		s.bad = true
		return -1
	}
	intEnd := s.i
	plain := s.b[start] != '-'
	if s.i < len(s.b) && s.b[s.i] == '.' {
		plain = false
		s.i++
		d := s.i
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
		}
		if s.i == d {
			s.bad = true
			return -1
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		plain = false
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		d := s.i
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
		}
		if s.i == d {
			s.bad = true
			return -1
		}
	}
	if !plain || intEnd-digits > 4 {
		return -1
	}
	v := 0
	for _, c := range s.b[digits:intEnd] {
		v = v*10 + int(c-'0')
	}
	return v
}

func (s *scanner) literal(word string) {
	s.ws()
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		s.bad = true
		return
	}
	s.i += len(word)
}

// skip scans any JSON value.
func (s *scanner) skip(depth int) {
	if depth > 64 {
		s.bad = true
		return
	}
	switch s.peek() {
	case '{':
		s.i++
		if s.peek() == '}' {
			s.i++
			return
		}
		for !s.bad {
			s.str()
			s.expect(':')
			s.skip(depth + 1)
			if s.peek() == ',' {
				s.i++
				continue
			}
			s.expect('}')
			return
		}
	case '[':
		s.i++
		if s.peek() == ']' {
			s.i++
			return
		}
		for !s.bad {
			s.skip(depth + 1)
			if s.peek() == ',' {
				s.i++
				continue
			}
			s.expect(']')
			return
		}
	case '"':
		s.str()
	case 't':
		s.literal("true")
	case 'f':
		s.literal("false")
	case 'n':
		s.literal("null")
	default:
		s.number()
	}
}

// parseEntry parses a route value into ups (reused), or reports false.
func parseEntry(b []byte, ups []upstream) ([]upstream, bool) {
	s := scanner{b: b}
	ups = ups[:0]
	seen := false
	s.expect('{')
	if !s.bad && s.peek() == '}' {
		s.i++
	} else {
		for !s.bad {
			key, esc := s.str()
			s.expect(':')
			if !s.bad && !esc && string(key) == "upstreams" {
				if seen {
					return ups, false // duplicate key
				}
				seen = true
				ups = s.upstreams(ups)
			} else {
				s.skip(1)
			}
			if s.peek() == ',' {
				s.i++
				continue
			}
			s.expect('}')
			break
		}
	}
	s.ws()
	if s.bad || s.i != len(s.b) || !seen || len(ups) == 0 {
		return ups, false
	}
	return ups, true
}

func (s *scanner) upstreams(ups []upstream) []upstream {
	s.expect('[')
	if s.bad {
		return ups
	}
	if s.peek() == ']' {
		s.i++
		return ups
	}
	for !s.bad {
		if len(ups) == maxUpstreams {
			s.bad = true
			return ups
		}
		u, ok := s.upstream()
		if !ok {
			s.bad = true
			return ups
		}
		ups = append(ups, u)
		if s.peek() == ',' {
			s.i++
			continue
		}
		s.expect(']')
		break
	}
	return ups
}

func (s *scanner) upstream() (upstream, bool) {
	u := upstream{weight: 1}
	var haveAddr, haveWeight bool
	s.expect('{')
	if s.bad {
		return u, false
	}
	if s.peek() == '}' {
		s.i++
		return u, false // no addr
	}
	for !s.bad {
		key, esc := s.str()
		s.expect(':')
		switch {
		case s.bad:
			return u, false
		case !esc && string(key) == "addr":
			if haveAddr || s.peek() != '"' {
				return u, false
			}
			haveAddr = true
			addr, aesc := s.str()
			if s.bad || aesc || !validAddr(addr) {
				return u, false
			}
			u.addr = addr
		case !esc && string(key) == "weight":
			if haveWeight {
				return u, false
			}
			haveWeight = true
			c := s.peek()
			if c < '0' || c > '9' {
				return u, false
			}
			w := s.number()
			if w < 1 || w > 1000 {
				return u, false
			}
			u.weight = w
		default:
			s.skip(2)
		}
		if s.peek() == ',' {
			s.i++
			continue
		}
		s.expect('}')
		break
	}
	return u, !s.bad && haveAddr
}

func validAddr(a []byte) bool {
	if len(a) == 0 || len(a) > 255 {
		return false
	}
	for _, c := range a {
		if c < 0x20 || c == ',' || c == '=' || c == '/' {
			return false
		}
	}
	return true
}
