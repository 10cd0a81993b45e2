// Package tmplwalk visits the nodes of a parsed Go text/template, for the
// checks Anvil makes on templates before running them (the config names a
// boot profile's kernel arguments refer to, ranges too large to run).
//
// It only walks; what a node means is the caller's business.
package tmplwalk

import "text/template/parse"

// Walk calls visit for n and, in order, every node below it: lists,
// actions, the pipelines and bodies of if, range and with, the commands of
// a pipeline and their arguments, and template calls' pipelines. When
// visit returns false, the nodes below that one are skipped.
func Walk(n parse.Node, visit func(parse.Node) bool) {
	if isNil(n) || !visit(n) {
		return
	}
	switch n := n.(type) {
	case *parse.ListNode:
		for _, c := range n.Nodes {
			Walk(c, visit)
		}
	case *parse.ActionNode:
		Walk(n.Pipe, visit)
	case *parse.IfNode:
		walkBranch(&n.BranchNode, visit)
	case *parse.RangeNode:
		walkBranch(&n.BranchNode, visit)
	case *parse.WithNode:
		walkBranch(&n.BranchNode, visit)
	case *parse.TemplateNode:
		Walk(n.Pipe, visit)
	case *parse.PipeNode:
		for _, c := range n.Cmds {
			Walk(c, visit)
		}
	case *parse.CommandNode:
		for _, a := range n.Args {
			Walk(a, visit)
		}
	}
}

func walkBranch(b *parse.BranchNode, visit func(parse.Node) bool) {
	Walk(b.Pipe, visit)
	Walk(b.List, visit)
	Walk(b.ElseList, visit)
}

// isNil reports whether n is nil, including a typed nil pointer (an if
// without else has a nil *ListNode as its ElseList).
func isNil(n parse.Node) bool {
	switch n := n.(type) {
	case nil:
		return true
	case *parse.ListNode:
		return n == nil
	case *parse.PipeNode:
		return n == nil
	}
	return false
}
