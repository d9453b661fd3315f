// HeraldDomain: filled in by its issue.
