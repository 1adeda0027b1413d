"""Students' servers: no formgrader and no course list (instructors' tools)."""
c = get_config()  # noqa: F821

c.ServerApp.jpserver_extensions = {
    "nbgrader.server_extensions.formgrader": False,
    "nbgrader.server_extensions.course_list": False,
}
