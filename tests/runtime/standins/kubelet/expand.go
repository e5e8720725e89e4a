package main

import "strings"

// expand replaces $(NAME) with the value of NAME as the kubelet does for a container's env
// values, command and args: "$$" is an escaped "$", and a reference to an unknown name (or an
// unclosed one) stays as written.
func expand(input string, vars map[string]string) string {
	if !strings.Contains(input, "$") {
		return input
	}
	var out strings.Builder
	for i := 0; i < len(input); i++ {
		if input[i] != '$' || i+1 == len(input) {
			out.WriteByte(input[i])
			continue
		}
		switch input[i+1] {
		case '$':
			out.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(input[i+2:], ')')
			if end < 0 {
				out.WriteString(input[i:])
				return out.String()
			}
			name := input[i+2 : i+2+end]
			if value, ok := vars[name]; ok {
				out.WriteString(value)
			} else {
				out.WriteString(input[i : i+3+end])
			}
			i += 2 + end
		default:
			out.WriteByte('$')
		}
	}
	return out.String()
}
