"""What end hosts and controllers do about a fault routing does not see: move flows off the
suspected link (hash dodging) or take the link out of service (isolation)."""
